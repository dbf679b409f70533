"""Every shape of secret `mask_secrets` masks in a command line, and the look-alikes it leaves
alone (issue 36, finding 12)."""

from __future__ import annotations

import pytest

from gputop.core.masking import MASK, mask_command, mask_fact, mask_secrets

MASKED = [
    (["--password=hunter2"], ["--password=***"]),
    (["--password", "hunter2"], ["--password", "***"]),
    (["--DB-Password=hunter2"], ["--DB-Password=***"]),
    (["--passwd", "hunter2"], ["--passwd", "***"]),
    (["--token", "hunter2"], ["--token", "***"]),
    (["--hf-token=hunter2"], ["--hf-token=***"]),
    (["--auth_token", "hunter2"], ["--auth_token", "***"]),
    (["--api-key=hunter2"], ["--api-key=***"]),
    (["--api_key", "hunter2"], ["--api_key", "***"]),
    (["--apikey=hunter2"], ["--apikey=***"]),
    (["--access-key", "hunter2"], ["--access-key", "***"]),
    (["--secret", "hunter2"], ["--secret", "***"]),
    (["--secret-access-key=hunter2"], ["--secret-access-key=***"]),
    (["--secretkey=hunter2"], ["--secretkey=***"]),
    (["--token="], ["--token=***"]),
    (["AWS_SECRET_ACCESS_KEY=hunter2"], ["AWS_SECRET_ACCESS_KEY=***"]),
    (["OPENAI_API_KEY=hunter2"], ["OPENAI_API_KEY=***"]),
    (["WANDB_KEY=hunter2"], ["WANDB_KEY=***"]),
    (["HF_TOKEN=hunter2"], ["HF_TOKEN=***"]),
    (["hf_token=hunter2"], ["hf_token=***"]),
    (["MY_SECRET=hunter2"], ["MY_SECRET=***"]),
    (["PGPASSWORD=hunter2"], ["PGPASSWORD=***"]),
    (["DB_PASSWORD_FILE=hunter2"], ["DB_PASSWORD_FILE=***"]),
    (["db.password=hunter2"], ["db.password=***"]),  # a Hydra override
    (["+wandb.api_key=hunter2"], ["+wandb.api_key=***"]),
    (["https://alice:hunter2@example.com/x"], ["https://alice:***@example.com/x"]),
    (["--db=postgres://alice:hunter2@db:5432/x"], ["--db=postgres://alice:***@db:5432/x"]),
    (["TRACKING_URI=https://alice:hunter2@host"], ["TRACKING_URI=https://alice:***@host"]),
    (["https://alice:hun@ter2@host/x"], ["https://alice:***@host/x"]),
    (["python", "train.py", "--password", "hunter2", "--lr", "0.1"],
     ["python", "train.py", "--password", "***", "--lr", "0.1"]),
]

LEFT_ALONE = [
    ["--tokenizer", "gpt2"],
    ["--max-tokens", "5"],
    ["--max_new_tokens=5"],
    ["--key-file", "client.pem"],  # a path to a key, not the key
    ["--key", "image"],  # a bare --key names a field as often as a secret
    ["--sort-key", "loss"],
    ["--passes", "3"],
    ["--basic-auth-file", "users"],
    ["--token", "--verbose"],  # the next word is an option, not the token's value
    ["--token"],
    ["-p", "hunter2"],  # a one-letter option says nothing of what it takes
    ["http://host:8080/x"],
    ["https://alice@example.com/x"],
    ["git@github.com:org/repo.git"],
    ["alice@host:/data"],
    ["lr=0.1"],
    ["model.tokenizer=gpt2"],
    ["--num-workers=4"],
    ["train.py"],
]


@pytest.mark.parametrize(("argv", "masked"), MASKED)
def test_secret_shapes_are_masked(argv: list[str], masked: list[str]) -> None:
    assert mask_secrets(argv) == masked
    assert mask_command(" ".join(argv)) == " ".join(masked)


@pytest.mark.parametrize("argv", LEFT_ALONE)
def test_look_alikes_are_left_alone(argv: list[str]) -> None:
    assert mask_secrets(argv) == argv
    assert mask_command(" ".join(argv)) == " ".join(argv)


def test_a_joined_line_keeps_its_spacing() -> None:
    assert mask_command(" train.py  --token\thunter2 ") == " train.py  --token\t*** "


@pytest.mark.parametrize(("name", "value", "masked"), [
    ("argv", "train.py --token hunter2", "train.py --token ***"),
    ("password", "hunter2", MASK),
    ("api_key", 12345, MASK),
    ("rank", 3, 3),
    ("device", "cuda:0", "cuda:0"),
])
def test_named_facts(name: str, value: object, masked: object) -> None:
    assert mask_fact(name, value) == masked
