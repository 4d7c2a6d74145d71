"""gateway/protocols/torchserve/keys.py: TorchServe's keys, their expiry and renewal."""

from __future__ import annotations

import json

from gateway.protocols.torchserve.keys import Keys


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_each_key_opens_its_own_api_only_until_it_expires(tmp_path):
    clock = Clock()
    keys = Keys(tmp_path, expiry_min=60, clock=clock)
    written = json.loads((tmp_path / "key_file.json").read_text())
    assert set(written) == {"management", "inference", "API"}
    assert (tmp_path / "key_file.json").stat().st_mode & 0o077 == 0
    inference = written["inference"]["key"]
    assert keys.check("inference", f"Bearer {inference}")
    assert keys.check("inference", f"bearer {inference}".encode())
    assert not keys.check("management", f"Bearer {inference}")
    assert not keys.check("inference", inference)  # no scheme
    assert not keys.check("inference", None)
    assert keys.check("API", f"Bearer {written['API']['key']}")
    clock.now += 3599
    assert keys.check("inference", f"Bearer {inference}")
    clock.now += 2  # an hour and a second: expired, as TorchServe's
    assert not keys.check("inference", f"Bearer {inference}")
    assert keys.check("API", f"Bearer {written['API']['key']}")  # the API key never expires


def test_renewal_replaces_one_key_and_rewrites_the_file(tmp_path):
    clock = Clock()
    keys = Keys(tmp_path, expiry_min=1, clock=clock)
    before = json.loads((tmp_path / "key_file.json").read_text())
    clock.now += 120  # both expired
    keys.renew("management")
    after = json.loads((tmp_path / "key_file.json").read_text())
    assert after["inference"] == before["inference"]
    assert after["management"]["key"] != before["management"]["key"]
    assert keys.check("management", f"Bearer {after['management']['key']}")
    assert not keys.check("management", f"Bearer {before['management']['key']}")
    assert not keys.check("inference", f"Bearer {before['inference']['key']}")
    assert list(tmp_path.iterdir()) == [tmp_path / "key_file.json"]  # no staged file left
