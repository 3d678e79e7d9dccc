"""The commands of a docs page's ```bash block, run as written in tests: the block that
exports a trained run (`python -m train.export`), each `python -m train` shortened to a few
smoke steps and every workdirs/ and exports/ path moved under a test folder."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

MODELS_DOC = Path(__file__).resolve().parents[1] / "docs" / "models.md"


def short_run(steps: int) -> list[str]:
    """Overrides that end a training run after `steps` steps, with one eval and checkpoint."""
    return [f"--config.train.num_steps={steps}", "--config.train.eval_every=0",
            f"--config.train.checkpoint_every={steps}"]


def export_block_commands(root: Path, steps: int, *, needs: str = "", doc: Path = MODELS_DOC
                          ) -> list[list[str]]:
    """The first block of `doc` that runs `train.export` (and holds `needs`), as argv after
    `-m`: its workdirs/ and exports/ paths moved under `root`, `smoke` added to every training
    run's variant and `short_run(steps)` to its arguments."""
    block = next(b for b in re.findall(r"```bash\n(.*?)```", doc.read_text(), re.S)
                 if "train.export" in b and needs in b)
    commands = []
    for line in block.strip().split("\n"):
        argv = [re.sub(r"(^|init=)((?:workdirs|exports)/)",
                       lambda m: f"{m.group(1)}{root}/{m.group(2)}", arg)
                for arg in shlex.split(line, comments=True)]
        assert argv[:2] == ["python", "-m"], line
        if argv[2] == "train":
            argv[argv.index("--config") + 1] += ",smoke"
            argv += short_run(steps)
        commands.append(argv[2:])
    return commands


def run_command(argv: list[str]) -> int:
    """`python -m train ...` or `python -m train.export ...` in this process."""
    from train.__main__ import main
    from train.export import main as export

    return {"train": main, "train.export": export}[argv[0]](argv[1:])
