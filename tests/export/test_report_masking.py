"""The report masks secret-looking argv values as it renders them, whatever the recording
holds: one made by hand (or by a gputop before masking) may carry them (issue 36, finding 12)."""

from __future__ import annotations

from pathlib import Path

from gputop.export.report.data import report_data
from gputop.export.report.page import render_page
from gputop.recording.reader import Recording
from tests.helpers.synthetic_recording import write_synthetic_recording

SECRET = "hunter2"


def test_a_secret_in_a_recordings_commands_and_settings_never_reaches_the_page(
    tmp_path: Path,
) -> None:
    path = tmp_path / "run.sqlite"
    write_synthetic_recording(str(path), 50)
    with Recording(str(path)) as recording:
        data = report_data(recording)
    assert data["trainers"] and data["workers"]
    command = f"python train.py --password={SECRET} --token {SECRET}"
    for row in (*data["trainers"], *data["workers"]):
        row["name"] = command
    data["trainers"][0]["settings"].append(
        {"at": 0, "values": [["argv", command], ["api_key", SECRET]]})
    page = render_page(data)
    assert SECRET not in page
    assert "python train.py --password=***" in page
