"""The collector pause around bulk decoding: nests, is shared by threads, and leaves the
collector as the user had it."""

import gc
import threading

import pytest

from rljax_offline.runtime import gc_pause


@pytest.fixture(autouse=True)
def _restore_gc():
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_paused_turns_the_collector_off_and_back_on():
    gc.enable()
    with gc_pause.paused():
        assert not gc.isenabled()
        with gc_pause.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer block still runs
    assert gc.isenabled()


def test_a_collector_the_user_turned_off_stays_off():
    gc.disable()
    with gc_pause.paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_an_exception_inside_still_restores_the_collector():
    gc.enable()
    with pytest.raises(RuntimeError), gc_pause.paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_overlapping_threads_leave_the_collector_on():
    """Thread A enters, B enters, A leaves, B leaves: on only after the last one leaves (a
    per-call save and restore would leave it off, B having seen it off)."""
    gc.enable()
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def a():
        with gc_pause.paused():
            a_in.set()
            b_in.wait(5)
        a_out.set()

    def b():
        a_in.wait(5)
        with gc_pause.paused():
            b_in.set()
            a_out.wait(5)
            seen["after_a_left"] = gc.isenabled()

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == {"after_a_left": False}
    assert gc.isenabled()


def test_reading_episodes_decodes_with_the_collector_off(tmp_path, monkeypatch):
    """The episode-rows reader decodes with the collector off and turns it back on."""
    import numpy as np

    from rljax_offline import Episode, read_episodes, write_episodes
    from rljax_offline.data import reader

    eps = [Episode(observations=np.zeros((4, 2), np.float32), actions=np.zeros(3, np.int64),
                   rewards=np.ones(3, np.float32), terminated=True) for _ in range(3)]
    write_episodes(eps, str(tmp_path / "data"))
    during = []
    decode = reader.decode_episode

    def spy(*args, **kwargs):
        during.append(gc.isenabled())
        return decode(*args, **kwargs)

    monkeypatch.setattr(reader, "decode_episode", spy)
    gc.enable()
    assert len(read_episodes(str(tmp_path / "data"))) == 3
    assert during == [False] * 3
    assert gc.isenabled()
