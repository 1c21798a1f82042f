"""Every registered task (benchmark) and attack passes its conformance checks; broken ones do not."""

from __future__ import annotations

from typing import ClassVar

import pytest

from bench.core.registry import attacks, register_attack, register_task, scoped, tasks
from bench.testing.components import ATTACK_CHECKS, TASK_CHECKS, check_attack, check_task
from bench.testing.mechanisms import ConformanceError
from tasks.dp_vit import DpVit


@pytest.mark.parametrize("check", sorted(TASK_CHECKS))
@pytest.mark.parametrize("name", tasks.list())
def test_registered_task_conforms(name, check):
    TASK_CHECKS[check](name)


@pytest.mark.parametrize("check", sorted(ATTACK_CHECKS))
@pytest.mark.parametrize("name", attacks.list())
def test_registered_attack_conforms(name, check):
    ATTACK_CHECKS[check](name)


def test_a_task_whose_attack_needs_what_it_does_not_provide_fails():
    with scoped():
        @register_task("broken_wiring")
        class Broken(DpVit):
            """A dp_vit that says it trains nothing."""

            dataset = "synth_objects"
            preset_name = "dp_vit_synth_objects"
            attacks: ClassVar[tuple[str, ...]] = ("membership",)
            provides: ClassVar[tuple[str, ...]] = ()

        with pytest.raises(ConformanceError, match="requires 'trained_classifier'"):
            check_task("broken_wiring")


def test_a_tunable_setting_that_does_not_exist_fails():
    from bench.core.params import Param, ParamSpace

    with scoped():
        @register_task("broken_tunable")
        class Broken(DpVit):
            """A dp_vit tuning a setting it does not have."""

            dataset = "synth_objects"
            preset_name = "dp_vit_synth_objects"
            tunable: ClassVar[ParamSpace] = ParamSpace(**{"training.temperature": Param(float, 1.0, low=0.1, high=2.0)})

        with pytest.raises(ConformanceError, match="training.temperature"):
            check_task("broken_tunable")


def test_an_attack_requiring_what_no_task_provides_fails():
    from attacks.membership import Membership

    with scoped():
        @register_attack("broken_membership")
        class Broken(Membership):
            """Membership inference against a model no task trains."""

            preset_name = "membership"
            requires: ClassVar[str] = "a_crystal_ball"

        with pytest.raises(ConformanceError, match="a_crystal_ball"):
            check_attack("broken_membership")


def test_an_attack_without_its_preset_fails():
    from attacks.membership import Membership

    with scoped():
        @register_attack("presetless")
        class Presetless(Membership):
            """Membership inference whose preset file was never written."""

        with pytest.raises(ConformanceError, match="no preset file"):
            check_attack("presetless")


def test_an_attack_with_a_version_the_cell_key_cannot_hold_fails():
    from attacks.membership import Membership

    with scoped():
        @register_attack("badly_versioned")
        class Badly(Membership):
            """Membership inference versioned by a string."""

            preset_name = "membership"
            version: ClassVar[object] = "2b"

        with pytest.raises(ConformanceError, match="positive int"):
            check_attack("badly_versioned")
