"""startup.frozen_imports: what the imports inside make is frozen, and the collector is back as it was."""

from __future__ import annotations

import gc

import pytest

from scaletrain_trainer.startup import frozen_imports


@pytest.fixture
def unfrozen_after():
    yield
    gc.unfreeze()  # give this test process's objects back to the collector


@pytest.mark.parametrize("enabled", [True, False])
def test_what_the_imports_made_is_frozen_and_the_collector_is_as_it_was(unfrozen_after, enabled):
    (gc.enable if enabled else gc.disable)()
    try:
        before = gc.get_freeze_count()
        with frozen_imports():
            assert not gc.isenabled()  # no collection scans the import's objects
            assert gc.get_freeze_count() == before  # frozen after the imports, not before them
            made = [[index] for index in range(1000)]  # container objects, as an import's are
        assert gc.get_freeze_count() >= before + len(made)
        assert not any(tracked is made[0] for tracked in gc.get_objects())  # the collector no longer sees it
        assert gc.isenabled() is enabled
    finally:
        gc.enable()


def test_a_failed_import_still_turns_the_collector_back_on(unfrozen_after):
    with pytest.raises(ImportError), frozen_imports():
        import scaletrain_trainer.no_such_module  # noqa: F401
    assert gc.isenabled()
