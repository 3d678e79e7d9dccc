"""metrics.jsonl on resume (damaged lines kept aside and reported) and how metrics print."""

from __future__ import annotations

import json

from train.metrics_writer import DAMAGED, SUPERSEDED, MetricsWriter, format_value


def _record(step: int) -> str:
    return json.dumps({"step": step, "split": "train", "loss": 1.0}) + "\n"


def test_damaged_lines_are_kept_aside_with_their_line_number_and_reported(tmp_path, capsys):
    """A line in the middle that is not JSON, one without a step, and a last line cut short by a
    kill: none is dropped without a word. They go to metrics.damaged.jsonl with their line
    number, reason and text; the console says how many and where."""
    log = tmp_path / "metrics.jsonl"
    garbage = "\x00\x00\x00 disk full\n"
    log.write_text(_record(5) + garbage + _record(10) + '["no step"]\n' + _record(15)
                   + '{"step": 20, "spl')
    writer = MetricsWriter(tmp_path, total_steps=30, start_step=10, progress_bar=False)
    writer.write(11, "train", {"loss": 0.5})
    writer.close()

    assert log.read_text().splitlines()[:2] == [_record(5).strip(), _record(10).strip()]
    assert [json.loads(line)["step"] for line in log.read_text().splitlines()] == [5, 10, 11]
    assert (tmp_path / SUPERSEDED).read_text() == _record(15)
    damaged = [json.loads(line) for line in (tmp_path / DAMAGED).read_text().splitlines()]
    assert [(d["line"], d["text"]) for d in damaged] == [
        (2, garbage), (4, '["no step"]\n'), (6, '{"step": 20, "spl')]
    assert damaged[0]["reason"].startswith("not JSON")
    assert damaged[1]["reason"] == "a JSON value without an integer 'step'"
    assert damaged[2]["reason"].startswith("cut short: the last line")
    err = capsys.readouterr().err
    assert f"metrics.jsonl: 3 damaged line(s) moved to {tmp_path / DAMAGED} (line 2: not JSON" in err
    assert "line 6: cut short" in err
    assert "metrics.jsonl: 1 record(s) after step 10, which this run redoes, moved to" in err


def test_a_whole_last_record_that_lost_its_newline_is_kept(tmp_path, capsys):
    log = tmp_path / "metrics.jsonl"
    log.write_text(_record(5) + _record(10).strip())
    writer = MetricsWriter(tmp_path, total_steps=30, start_step=10, progress_bar=False)
    writer.write(15, "train", {"loss": 0.5})
    writer.close()
    assert [json.loads(line)["step"] for line in log.read_text().splitlines()] == [5, 10, 15]
    assert not (tmp_path / DAMAGED).exists()
    assert "damaged" not in capsys.readouterr().err


def test_an_intact_log_is_left_as_it_is_without_a_word(tmp_path, capsys):
    log = tmp_path / "metrics.jsonl"
    log.write_text(_record(5) + _record(10))
    before = log.stat().st_mtime_ns
    MetricsWriter(tmp_path, total_steps=30, start_step=10, progress_bar=False).close()
    assert log.stat().st_mtime_ns == before and log.read_text() == _record(5) + _record(10)
    assert capsys.readouterr().err == ""


def test_counts_print_as_whole_numbers_and_stay_numbers_in_the_log(tmp_path, capsys):
    writer = MetricsWriter(tmp_path, total_steps=30, start_step=0, progress_bar=False)
    writer.write(5, "train", {"examples": 123456, "decoded": 575, "loss": 2.3456789,
                              "accuracy": 1.0})
    writer.close()
    assert "[train step 5] examples=123456 decoded=575 loss=2.346 accuracy=1" in \
        capsys.readouterr().err
    record = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert record["examples"] == 123456 and isinstance(record["examples"], int)
    assert record["loss"] == 2.3456789
    assert format_value(575, ".4f") == "575" and format_value(0.5, ".4f") == "0.5000"
