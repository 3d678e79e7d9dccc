"""Configs: `:arg` variants, overrides, and errors that name the key before anything compiles."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

import configs
from configs.common import parse_arg
from train.__main__ import check_workdir, main
from train.config import ConfigError, apply_override, experiment_configs, load_config_file, to_json

CONFIG = "configs/vit/fashion_mnist.py"


def test_every_config_docstring_starts_with_its_command():
    for path in Path("configs").rglob("*.py"):
        tree = ast.parse(path.read_text())
        if any(isinstance(node, ast.FunctionDef) and node.name == "get_config" for node in tree.body):
            doc = ast.get_docstring(tree) or ""
            assert doc.startswith(f"python -m train --config {path}"), path


def test_variants_select_table_8_rows_and_sizes():
    for posemb in ("none", "learned_1d", "learned_2d", "sincos_2d", "relative",
                   "relative_bias_2d", "rope_2d", "alibi_2d"):
        assert load_config_file(f"{CONFIG}:posemb={posemb}").model.posemb == posemb
    assert load_config_file(CONFIG).model.posemb_mode == "stem"  # Table 8's columns
    for mode in ("every_layer", "every_layer_shared"):
        model = load_config_file(f"{CONFIG}:posemb=learned_2d,posemb_mode={mode}").model
        assert (model.posemb, model.posemb_mode) == ("learned_2d", mode)
    config = load_config_file(f"{CONFIG}:size=B,smoke")
    assert config.model.hidden_size == 32  # smoke shrinks whatever size was chosen
    assert load_config_file(f"{CONFIG}:size=B").model.num_layers == 12
    assert load_config_file(f"{CONFIG}:size=B").model.activation == "gelu"  # the paper's
    with pytest.raises(ConfigError, match=r"unknown config argument 'posmeb'.*allowed: \[.*'posemb'"):
        load_config_file(f"{CONFIG}:posmeb=none")
    with pytest.raises(ValueError, match="needs a value"):
        parse_arg("posemb", posemb="x")
    # A misspelt bool is refused (it meant False: 'smoke=ture' ran the full sweep).
    assert parse_arg("smoke=off,epochs=3", smoke=True, epochs=1).to_dict() == \
        {"smoke": False, "epochs": 3}
    with pytest.raises(ValueError, match=r"'smoke=ture': expected smoke, smoke=true or"):
        parse_arg("smoke=ture", smoke=False)
    with pytest.raises(ValueError, match=r"'epochs=two': expected an int like 1"):
        parse_arg("size=B,epochs=two", size="Ti", epochs=1)


def test_config_and_sweep_files_fail_with_the_file_and_the_fix(tmp_path):
    """Both loaders (train.config, train.sweep_spec) share one: a missing file, a file without
    the function, and the file's own argument errors name the file."""
    from train.sweep_spec import SweepError, load_sweep_file

    with pytest.raises(ConfigError, match=r"config file 'configs/vit/fashon_mnist.py' does not"):
        load_config_file("configs/vit/fashon_mnist.py:smoke")
    empty = tmp_path / "empty.py"
    empty.write_text("X = 1\n")
    with pytest.raises(ConfigError, match=r"empty.py' defines no get_config\(arg\)"):
        load_config_file(str(empty))
    with pytest.raises(SweepError, match=r"empty.py' defines no get_sweep\(arg\)"):
        load_sweep_file(str(empty))
    with pytest.raises(SweepError, match=r"vit_fmnist.py' does not exist"):
        load_sweep_file("configs/ablations/vit_fmnist.py")
    with pytest.raises(SweepError, match=r"get_sweep returned int, not a Sweep"):
        (tmp_path / "wrong.py").write_text("def get_sweep(arg=None):\n    return 3\n")
        load_sweep_file(str(tmp_path / "wrong.py"))
    with pytest.raises(ConfigError, match=r"fashion_mnist.py: unknown config argument 'sise'"):
        load_config_file(f"{CONFIG}:sise=B")


def test_finetune_learning_rate_and_warmup_follow_the_recipe_unless_given():
    # lr=0 is the recipe's (5e-5; 1e-3 feature-based), and an explicit 5e-5 is kept as given.
    assert load_config_file("configs/bert/finetune.py:task=spam").optimizer.learning_rate == 5e-5
    for arg, lr in (("features=last", 1e-3), ("features=last,lr=5e-5", 5e-5),
                    ("smoke,lr=5e-5", 5e-5)):
        config = load_config_file(f"configs/bert/finetune.py:task=brown_pos,{arg}")
        assert config.optimizer.learning_rate == lr, arg
    tiny = load_config_file("configs/bert/finetune.py:task=spam,epochs=0.005")  # one step
    assert (tiny.train.num_steps, tiny.optimizer.warmup_steps) == (1, 0)


def test_overrides_are_typed():
    """A command-line string becomes the type of the value it replaces (an int for a float, a
    list for a tuple); a value of another type, a key below a value and a section are refused
    with the key named."""
    config = load_config_file(CONFIG)
    apply_override(config, "model.image_size", "(14, 14)")
    assert config.model.image_size == (14, 14)
    apply_override(config, "model.image_size", "[28, 28]")           # a list for a tuple
    assert config.model.image_size == (28, 28) and isinstance(config.model.image_size, tuple)
    apply_override(config, "optimizer.learning_rate", "1")
    apply_override(config, "data.augment", "crop_flip")
    apply_override(config, "train.progress_bar", "false")
    apply_override(config, "model.num_layers", "7")
    assert config.optimizer.learning_rate == 1.0 and isinstance(config.optimizer.learning_rate, float)
    assert config.data.augment == "crop_flip" and config.train.progress_bar is False
    assert config.model.num_layers == 7 and type(config.model.num_layers) is int
    with pytest.raises(ConfigError, match="expected an int"):
        apply_override(config, "model.num_layers", "four")
    with pytest.raises(ConfigError, match=r"model.num_layers='2.5': expected an int like 7, "
                                          r"got float"):
        apply_override(config, "model.num_layers", "2.5")
    with pytest.raises(ConfigError, match=r"expected a float like 1.0, got str"):
        apply_override(config, "optimizer.learning_rate", "'1e-3'")
    with pytest.raises(ConfigError, match=r"expected a tuple like \(28, 28\), got int"):
        apply_override(config, "model.image_size", "28")
    with pytest.raises(ConfigError, match="expected an int like .*, got a bool"):
        apply_override(config, "train.num_steps", "True")  # bool is an int to isinstance
    with pytest.raises(ConfigError, match="is a section"):
        apply_override(config, "model", "1")
    with pytest.raises(ConfigError, match="config.model.num_layers is a value, not a section"):
        apply_override(config, "model.num_layers.depth", "1")
    assert config.model.num_layers == 7 and config.optimizer.learning_rate == 1.0


@pytest.mark.parametrize("override, message", [
    ("--config.model.num_haeds=3", 'unknown config key config.model.num_haeds. Did you mean "num_heads"'),
    ("--config.trian.num_steps=3", 'unknown config key config.trian. Did you mean "train"'),
    ("--config.model.patch_size=5", "config.model: patch_size=5 does not divide image_size=(28, 28)"),
    ("--config.model.num_heads=3", "config.model: num_heads=3 does not divide hidden_size=32"),
    ("--config.model.posemb=rope", "config.model: posemb='rope' is not one of"),
    ("--config.mesh.data=3", "config.mesh={'data': 3, 'fsdp': 1, 'tensor': 1} needs 3 devices but 1"),
    ("--config.data.batch_size=30", "config.data.batch_size=30 must split into grad_accum_steps=4"),
    ("--config.task.name=regress", "config.task.name='regress' is not one of ['classify', 'translate',"),
    ("--config.data.source=web", "config.data.source='web' is not one of ['local', 'tfds']"),
    ("--config.data.augment=rotate", "config.data.augment='rotate' is not one of ['none', 'flip', "
     "'crop_flip', 'inception_crop']"),
    ("--config.train.nonfinite=ignore", "config.train.nonfinite='ignore' is not one of ['stop', 'skip']"),
    ("--config.train.log_every=0", "config.train.log_every=0 must be >= 1"),
    ("--config.train.checkpoint_every=0", "config.train.checkpoint_every=0 must be >= 1"),
    ("--config.train.keep_checkpoints=0", "config.train.keep_checkpoints=0 must be >= 1"),
    ("--config.train.eval_every=-5", "config.train.eval_every=-5 must be >= 0 (0: only at the end)"),
    ("--config.train.num_steps=0", "config.train.num_steps=0 must be >= 1"),
    ("--config.train.grad_accum_steps=0", "config.train.grad_accum_steps=0 must be >= 1"),
    ("--config.train.peak_flops=-1.0",
     "config.train.peak_flops=-1.0 must be >= 0 (0: measure a matmul here)"),
    ("--config.optimizer.warmup_steps=-1", "config.optimizer.warmup_steps=-1 must be >= 0"),
    ("--config.optimizer.warmup_steps=1000", "config.train.num_steps=20 must be larger than "
     "config.optimizer.warmup_steps=1000: schedule 'cosine' warms up for 1000 steps, then decays "
     "until the run ends (config.optimizer.total_steps=-1). Set config.train.num_steps to 1001 or "
     "more, or config.optimizer.warmup_steps to 19 or less"),
    ("--config.optimizer.learning_rate=-0.001", "config.optimizer.learning_rate=-0.001 must be >= 0"),
    ("--config.optimizer.b2=1.0", "config.optimizer.b2=1.0 must be in [0, 1)"),
    ("--config.model.image_size=(56,56)", "config.model.image_size=(56, 56) does not match config.data.image_shape"),
    ("--config.optimizer.schedule=step", "config.optimizer.schedule='step' is not one of"),
    ("--config.optimizer.weight_decay=-1.0", "config.optimizer.weight_decay"),
    # read only by the evals: checked before training, not after eval_every lost steps
    ("--config.data.eval_split=tset", "dataset 'fashion_mnist' (local) has no split 'tset'"),
    ("--config.data.image_shape=(28,28)", "config.data.image_shape=(28, 28) must be (height, "
     "width, channels)"),
])
def test_bad_config_fails_before_compiling_and_names_the_key(override, message, tmp_path, capsys,
                                                            fashion_mnist_env):
    extra = ["--config.train.grad_accum_steps=4"] if "batch_size" in override else []
    code = main(["--config", f"{CONFIG}:smoke", "--workdir", str(tmp_path / "w"), override, *extra])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "w").exists()  # nothing written for a run that never started


def test_a_text_dataset_for_an_image_task_is_named(brown_data_root, tmp_path, capsys,
                                                   monkeypatch):
    monkeypatch.setenv("PAPERS_JAX_DATA", str(brown_data_root))
    for config in (f"{CONFIG}:smoke", "configs/vit/mae.py:smoke"):
        assert main(["--config", config, "--workdir", str(tmp_path / "w"),
                     "--config.data.name=brown"]) == 2
        err = capsys.readouterr().err
        assert "config.data.name='brown' (local) is not an image classification dataset " \
               "(features ['doc_id'" in err and "data.fetch fashion_mnist" in err, err
    assert not (tmp_path / "w").exists()


def test_missing_dataset_names_the_fetch_command(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PAPERS_JAX_DATA", str(tmp_path / "empty"))
    code = main(["--config", f"{CONFIG}:smoke", "--workdir", str(tmp_path / "w")])
    assert code == 2
    assert "python -m data.fetch fashion_mnist" in capsys.readouterr().err
    (tmp_path / "a_file").write_text("x")  # a workdir that is a file: exit 2, not a traceback
    assert main(["--config", f"{CONFIG}:smoke", "--workdir", str(tmp_path / "a_file")]) == 2
    assert "is a file, not a directory" in capsys.readouterr().err
    assert main(["--config", f"{CONFIG}:smoke", "--workdir", str(tmp_path / "a_file" / "run")]) == 2
    assert f"{tmp_path / 'a_file'} is a file, not a directory" in capsys.readouterr().err


def test_a_workdir_may_resume_on_another_mesh_but_not_another_experiment(tmp_path):
    config = load_config_file("configs/vit/fashion_mnist.py:smoke")
    (tmp_path / "config.json").write_text(to_json(config))
    assert check_workdir(tmp_path / "fresh", to_json(config), allow_change=False) == []
    assert check_workdir(tmp_path, to_json(config), allow_change=False) == []
    moved = load_config_file("configs/vit/fashion_mnist.py:smoke")
    apply_override(moved, "mesh.fsdp", "2")
    apply_override(moved, "mesh.tensor", "2")
    lines = check_workdir(tmp_path, to_json(moved), allow_change=False)
    assert lines == ["  mesh.fsdp: 1 in the workdir, 2 now", "  mesh.tensor: 1 in the workdir, 2 now"]
    apply_override(moved, "model.num_layers", "3")
    with pytest.raises(ConfigError, match="model.num_layers: 2 in the workdir, 3 now") as error:
        check_workdir(tmp_path, to_json(moved), allow_change=False)
    assert "mesh" not in str(error.value)  # only what changes the experiment is listed
    assert len(check_workdir(tmp_path, to_json(moved), allow_change=True)) == 2  # no checkpoint
    (tmp_path / "checkpoints" / "100").mkdir(parents=True)  # a train state of 2 layers
    with pytest.raises(ConfigError, match=r"(?s)another experiment: .*--allow_config_change "
                                          r"resumes only changes that keep the train state"):
        check_workdir(tmp_path, to_json(moved), allow_change=True)
    resumable = load_config_file("configs/vit/fashion_mnist.py:smoke")
    apply_override(resumable, "train.num_steps", "40")
    assert check_workdir(tmp_path, to_json(resumable), allow_change=True) == []


def test_a_workdir_written_before_a_key_was_added_resumes_with_its_old_value(tmp_path):
    """ViT configs gained init, init_head, data.resize and model.layer_norm_eps; a workdir saved
    without them ran what their defaults do (train/workdir.py ADDED_KEYS), so it resumes, and
    another value is still another experiment."""
    config = load_config_file("configs/vit/fashion_mnist.py:smoke")
    saved = json.loads(to_json(config))
    del saved["init"], saved["init_head"], saved["data"]["resize"]
    del saved["model"]["layer_norm_eps"]
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert check_workdir(tmp_path, to_json(config), allow_change=False) == []
    apply_override(config, "init", "workdirs/other")
    with pytest.raises(ConfigError, match="init: 'scratch' in the workdir, 'workdirs/other' now"):
        check_workdir(tmp_path, to_json(config), allow_change=False)
    # ImageNet's recipe gained init_posemb_resample: a pretraining run resumes as it was, and
    # where step 0 started from never stops a resume that asks (a moved pretraining workdir)
    imagenet = tmp_path / "imagenet"
    (imagenet / "checkpoints" / "100").mkdir(parents=True)
    current = load_config_file("configs/vit/imagenet.py")
    old = json.loads(to_json(current))
    del old["init_posemb_resample"]
    (imagenet / "config.json").write_text(json.dumps(old))
    assert check_workdir(imagenet, to_json(current), allow_change=False) == []
    apply_override(current, "init", "gs://bucket/pretrained")
    assert check_workdir(imagenet, to_json(current), allow_change=True) == []


def test_a_bert_workdir_from_before_the_alphabet_limit_resumes(tmp_path):
    """BERT pretraining gained data.vocab_max_characters (0: every character, what runs before
    it did): a workdir saved without it resumes; a limit is another experiment."""
    config = load_config_file("configs/bert/pretrain.py:smoke")
    saved = json.loads(to_json(config))
    del saved["data"]["vocab_max_characters"]
    (tmp_path / "config.json").write_text(json.dumps(saved))
    (tmp_path / "checkpoints" / "6").mkdir(parents=True)
    assert check_workdir(tmp_path, to_json(config), allow_change=False) == []
    apply_override(config, "data.vocab_max_characters", "1000")
    with pytest.raises(ConfigError, match="data.vocab_max_characters: 0 in the workdir, 1000"):
        check_workdir(tmp_path, to_json(config), allow_change=False)


def test_smoke_variants_measure_the_peak_their_mfu_is_computed_against():
    """A smoke run's MFU is a measurement like any other run's: no config fixes a made-up peak
    (train.peak_flops=0: measured by train/flops.py measure_matmul_peak in the run)."""
    smoke = [c.path for c in experiment_configs(Path(configs.__path__[0])) if "smoke" in c.variants]
    assert len(smoke) >= 4
    for path in smoke:
        assert load_config_file(f"{path}:smoke").train.peak_flops == 0.0, path


@pytest.mark.parametrize("spec, message", [
    ("configs/transformer/translate.py:smoke,arch=marian,posemb=rope",
     "arch=marian with posemb 'rope': Marian's models (and the export to them) have sinusoids"),
    ("configs/transformer/translate.py:arch=marian,row=E", "arch=marian with posemb 'learned'"),
    ("configs/bert/distill.py:mode=general,task=tweets", "task=tweets is a mode=task variant"),
    ("configs/bert/distill.py:mode=task,drop=ce", "drop= and ce_positions= are mode=general"),
])
def test_variants_that_contradict_each_other_are_refused(spec, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        load_config_file(spec)


def test_smoke_keeps_the_variants_given_beside_it():
    """`smoke` shrinks a run to seconds, but an argument given with it is not dropped: the row
    length of the LM, the MAE's steps, the teacher convnet's widths and blocks."""
    lm = load_config_file("configs/lm/english.py:smoke,length=24")
    assert lm.data.max_length == 24 and lm.train.num_steps == 6
    assert load_config_file("configs/lm/english.py:smoke").data.max_length == 16
    assert load_config_file("configs/lm/english.py:smoke,vocab=400").data.vocab_size == 400
    assert load_config_file("configs/lm/english.py:vocab=1024").data.vocab_size == 1024
    assert load_config_file("configs/lm/english.py").data.vocab_size == 4096
    with pytest.raises(ConfigError, match="vocab=-2 must be a positive number of BPE tokens"):
        load_config_file("configs/lm/english.py:vocab=-2")
    assert load_config_file("configs/vit/mae.py:smoke,steps=30").train.num_steps == 30
    assert load_config_file("configs/vit/mae.py:smoke").train.num_steps == 12
    teacher = load_config_file("configs/vit/convnet_teacher.py:smoke,widths=8-8-16,blocks=3")
    assert (teacher.model.widths, teacher.model.blocks_per_stage) == ((8, 8, 16), 3)
    small = load_config_file("configs/vit/convnet_teacher.py:smoke").model
    assert (small.widths, small.blocks_per_stage) == ((8, 16), 1)
    with pytest.raises(ValueError, match="widths='16-x' must be channel counts joined by '-'"):
        load_config_file("configs/vit/convnet_teacher.py:widths=16-x")


def test_a_typo_in_a_config_files_sections_is_refused(tmp_path, capsys, fashion_mnist_env):
    """A config file of one's own is not checked key by key as overrides are: a misspelt
    train.num_steps trained the default's 10,000 steps, a misspelt mesh axis ran on another
    mesh, a misspelt task.label_smoothing trained without smoothing. The trainer reads exactly
    configs/common.py's train and mesh keys; a task, its TASK_KEYS and DATA_KEYS."""
    from configs.common import mesh_config, train_config
    from train.partitioning import MESH_AXES
    from train.start_checks import TRAIN_KEYS

    assert set(TRAIN_KEYS) == set(train_config()) and set(MESH_AXES) == set(mesh_config())
    for section, typo, fix in (("train", "num_step", "num_steps"), ("mesh", "dta", "data"),
                               ("task", "label_smothing", "label_smoothing"),
                               ("data", "bach_size", "batch_size"),
                               ("data", "pack", "the classify task")):  # translation's key
        path = tmp_path / f"my_{section}.py"
        path.write_text("from configs.vit import fashion_mnist\n\n\ndef get_config(arg=None):\n"
                        "    config = fashion_mnist.get_config('smoke')\n"
                        f"    config.{section}.{typo} = 3\n    return config\n")
        for extra in ([], ["--print_config"]):
            assert main(["--config", str(path), "--workdir", str(tmp_path / "w"), *extra]) == 2
            err = capsys.readouterr().err
            assert f"unknown key config.{section}.{typo}" in err and fix in err, err
    assert not (tmp_path / "w").exists()


def test_every_config_and_sweep_run_declares_only_keys_its_task_reads():
    """The tasks' TASK_KEYS / DATA_KEYS cover every key the configs set: each config file's
    default, and each run of every ablation sweep (variants and row changes applied)."""
    from sweep_helpers import run_config
    from train import sweep as sweep_lib
    from train.start_checks import check_sections
    from train.sweep_spec import load_sweep_file

    configs = [p for p in Path("configs").glob("*/*.py")
               if p.parent.name != "ablations" and "def get_config" in p.read_text()]
    for path in configs:
        check_sections(load_config_file(str(path)))
    sweeps = [p for p in Path("configs/ablations").glob("*.py") if "def get_sweep" in p.read_text()]
    checked = 0
    for path in sweeps:
        for arg in ("", ":smoke"):
            sweep = load_sweep_file(f"{path}{arg}")
            for run in sweep_lib.plan(sweep, Path("unused"), list(sweep.rows), [0], []):
                check_sections(run_config(run))
                checked += 1
    assert len(configs) >= 10 and len(sweeps) >= 10 and checked > 200


@pytest.mark.parametrize("override, message", [
    ("train.grad_accum_steps=0", "config.train.grad_accum_steps=0 must be >= 1"),
    ("optimizer.b1=1.5", "config.optimizer.b1=1.5 must be in [0, 1)"),
    ("train.nonfinite=bogus", "config.train.nonfinite='bogus' is not one of"),
    ("data.batch_size=100", "config.data.batch_size=100 must split into grad_accum_steps=3"),
    ("model.param_dtype=bfloat16", "training keeps its parameters and optimizer state in float32"),
    ("data.batch_size=0", "config.data.batch_size=0 must be >= 1"),
    ("train.num_steps=99999999999", "config.train.num_steps=99999999999 must be below 2**31"),
    ("data.eval_batch_size=0", "config.data.eval_batch_size=0 must be >= 1"),
    ("task.label_smoothing=2.0", "config.task.label_smoothing=2.0 must be in [0, 1)"),
    ("data.augment=flipp", "config.data.augment='flipp' is not one of"),
    ("data.worker_count=-1", "config.data.worker_count=-1 must be >= 0"),
])
def test_print_config_refuses_what_a_start_refuses(override, message, capsys, fashion_mnist_env):
    extra = ["--config.train.grad_accum_steps=3"] if "batch_size" in override else []
    assert main(["--config", f"{CONFIG}:smoke", "--print_config", f"--config.{override}",
                 *extra]) == 2
    assert message in capsys.readouterr().err


def test_print_config_of_a_mesh_for_other_machines_notes_what_it_could_not_check(
        capsys, fashion_mnist_env):
    assert main(["--config", CONFIG, "--print_config", "--config.mesh.data=64"]) == 0
    assert "not checked here, where the mesh cannot be built" in capsys.readouterr().err


def test_overrides_of_optional_keys_and_of_tuples_of_names_read_as_meant():
    """A key whose default is None takes any Python literal and the bool words; a value that is
    none says so (it said 'expected a NoneType'). A tuple of names takes names only (a tuple
    of numbers failed deep in the vocabulary code)."""
    config = load_config_file("configs/transformer/translate.py:smoke")
    assert config.model.tie_output is None
    apply_override(config, "model.tie_output", "true")
    assert config.model.tie_output is True
    with pytest.raises(ConfigError, match=r"head_dim='abc': expected a Python literal \(None, "
                                          r"True, 64, .*its default is None"):
        apply_override(config, "model.head_dim", "abc")
    apply_override(config, "model.head_dim", "16")
    assert config.model.head_dim == 16
    lm = load_config_file("configs/lm/english.py:smoke")
    apply_override(lm, "model.num_kv_heads", "1")  # multi-query attention, not True
    assert lm.model.num_kv_heads == 1 and type(lm.model.num_kv_heads) is int
    bert = load_config_file("configs/bert/pretrain.py:smoke")
    apply_override(bert, "data.names", "('brown',)")
    assert bert.data.names == ("brown",)
    with pytest.raises(ConfigError, match=r"data.names='\(1, 2\)': expected a tuple of strs"):
        apply_override(bert, "data.names", "(1, 2)")
