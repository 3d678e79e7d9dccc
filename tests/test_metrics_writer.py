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


def _tensorboard_view(folder, tag: str) -> list[int]:
    """The steps of scalar `tag` that TensorBoard shows from the event files in `folder`: files
    in name order (their names start with the time they were made), and a SessionLog START at
    step s hides every event read before it with a step >= s (TensorBoard's purge of what a
    crashed run logged past its restart point)."""
    import struct

    from tensorboardX.proto import event_pb2

    shown = []
    for path in sorted(folder.glob("events.out.tfevents.*")):
        data, offset = path.read_bytes(), 0
        while offset < len(data):  # TFRecord: length, its CRC, the Event proto, its CRC
            (length,) = struct.unpack("<Q", data[offset:offset + 8])
            event = event_pb2.Event.FromString(data[offset + 12:offset + 12 + length])
            offset += 16 + length
            if event.HasField("session_log") and event.session_log.status == event.session_log.START:
                shown = [step for step in shown if step < event.step]
            shown += [event.step for value in event.summary.value if value.tag == tag]
    return shown


def test_tensorboard_hides_what_a_killed_run_logged_after_its_last_checkpoint(tmp_path,
                                                                             monkeypatch):
    """A run killed at step 15 after its checkpoint at 10 resumes from 10: TensorBoard shows
    steps 5 and 10 of the first run and 11 of the second, not the 15 it redoes, as
    metrics.jsonl does."""
    import tensorboardX.event_file_writer as event_file_writer

    now = [1_000_000_000.0]  # event file names hold the second they were made in
    monkeypatch.setattr(event_file_writer.time, "time", lambda: now[0])
    first = MetricsWriter(tmp_path, total_steps=30, start_step=0, progress_bar=False)
    for step in (5, 10, 15):
        first.write(step, "train", {"loss": 1.0})
    first.close()
    now[0] += 60
    resumed = MetricsWriter(tmp_path, total_steps=30, start_step=10, progress_bar=False)
    resumed.write(11, "train", {"loss": 0.5})
    resumed.close()
    assert _tensorboard_view(tmp_path / "tensorboard", "train/loss") == [5, 10, 11]
    assert [json.loads(line)["step"] for line in
            (tmp_path / "metrics.jsonl").read_text().splitlines()] == [5, 10, 11]
