"""``bench audit`` end to end: bounds, exit codes and every user error."""

from __future__ import annotations

import json
import re

import pytest

from bench.cli import main
from bench.core.interfaces import PrivacyClaim
from bench.core.registry import register_mechanism, scoped
from mechanisms.dp_pix import DPPix


class _NoChannelFactor(DPPix):
    """DP-Pix as in the grey-scale original: the noise forgets the channel factor C (3x too little)."""

    def noise_scale(self, channels: int) -> float:
        return super().noise_scale(1)


class _OddUnit(DPPix):
    """Claims a unit no auditor knows; it must never be run."""

    def apply(self, images, *, generator, boxes=None):
        raise AssertionError("the audit released images before validating the claim")

    def claim(self):
        return PrivacyClaim(1.0, unit="pixel rows (r=2)")


def _audit(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["audit", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _bound(out: str) -> float:
    return float(re.search(r"epsilon lower bound\s+([0-9.eE+-]+)", out).group(1))


def test_dp_pix_epsilon_1_block_4_at_10000_trials_stays_within_its_claim(capsys):
    code, out, err = _audit(capsys, "--mechanism", "dp_pix", "--param", "epsilon=1", "--param", "block=4",
                            "--trials", "10000", "--device", "cpu")
    assert code == 0, err
    # not refuted; 10000 trials at 0.95 are fewer than the 12519 a pass needs, so the verdict is inconclusive
    assert "epsilon=1 [m-pixel (m=1)]" in out and "INCONCLUSIVE" in out and "verdict: inconclusive" in out
    assert 0.5 < _bound(out) <= 1.0  # close to the claim: the test is strong, the mechanism sound
    largest = float(re.search(r"largest demonstrable\s+([0-9.]+)", out).group(1))
    assert largest == pytest.approx(7.905, abs=1e-3)


def test_dp_pix_without_channel_factor_exceeds_its_claim_and_exits_1(capsys):
    with scoped():
        register_mechanism("broken_dp_pix")(_NoChannelFactor)
        code, out, err = _audit(capsys, "--mechanism", "broken_dp_pix", "--param", "epsilon=1", "--param", "block=4",
                                "--trials", "10000")
    assert code == 1, out + err
    assert "FAIL" in out and _bound(out) > 2.0  # truly 3-DP


def test_json_report(capsys):
    code, out, _ = _audit(capsys, "--mechanism", "dp_latent", "--param", "epsilon=2", "--param", "latent_dim=2",
                          "--param", "steps=10", "--trials", "1000", "--json")
    data = json.loads(out)
    assert code == 0 and data["verdict"] == "inconclusive" and data["passed"] is False  # 1000 < trials_needed
    assert data["claim"]["unit"] == "latent (clipped)" and data["trials"] == 1000
    assert 0.5 < data["epsilon_lower_bound"] <= 2.0


def test_mechanism_without_claim_has_nothing_to_audit(capsys):
    code, out, _ = _audit(capsys, "--mechanism", "gaussian_noise")
    assert code == 0 and out.strip() == "gaussian_noise makes no formal claim: nothing to audit"


def test_mechanism_file_is_audited(capsys, tmp_path):
    plugin = tmp_path / "audit_plugin.py"
    plugin.write_text(
        "from bench.core.registry import register_mechanism\n"
        "from mechanisms.dp_pix import DPPix\n\n"
        "@register_mechanism('audit_file_dp_pix')\n"
        "class FileDPPix(DPPix):\n"
        "    pass\n"
    )
    with scoped():
        code, out, err = _audit(capsys, "--mechanism-file", str(plugin), "--mechanism", "audit_file_dp_pix",
                                "--trials", "200")
    assert code == 0, err
    assert "audit of audit_file_dp_pix" in out


@pytest.mark.parametrize("argv,message", [
    (["--mechanism", "dp_pix", "--trials", "99"], "--trials must be an integer in [100, 1,000,000,000]"),
    (["--mechanism", "dp_pix", "--trials", "1.5e3x"], "--trials must be an integer in [100, 1,000,000,000]"),
    (["--mechanism", "dp_pix", "--trials", "1e12"], "--trials must be an integer in [100, 1,000,000,000]"),
    (["--mechanism", "dp_pix", "--image-size", "100000"], "--image-size must be an integer in [4, 1,024]"),
    (["--mechanism", "dp_pix", "--confidence", "1.5"], "--confidence must be a number strictly between 0 and 1"),
    (["--mechanism", "dp_pix", "--seed", "-3"], "--seed must be an integer >= 0"),
    (["--mechanism", "dp_pix", "--device", "tpu"], "unknown device 'tpu'"),
    (["--mechanism", "dp_pix", "--param", "epsilon=0"], "epsilon"),
    (["--mechanism", "dp_pixx"], "did you mean 'dp_pix'"),
    (["--mechanism", "dp_pix", "--mechanism-file", "/no/such/file.py"], "no such file"),
])
def test_user_errors_exit_2_with_one_line(capsys, argv, message):
    code, out, err = _audit(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err


def test_unknown_unit_exits_2_naming_the_known_units_before_any_release(capsys):
    with scoped():
        register_mechanism("audit_odd_unit")(_OddUnit)
        code, out, err = _audit(capsys, "--mechanism", "audit_odd_unit", "--trials", "100")
    assert code == 2 and out == ""
    assert "'pixel rows (r=2)'" in err and "'m-pixel'" in err and "'latent (clipped)'" in err
