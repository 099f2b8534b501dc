"""Learning curves: the x-axis in iterations, gradient updates or samples; the target line
where it was asked for."""

import numpy as np
import pytest

from rljax_offline.apps import plotting


def result(i, batch=256, updates=10):
    steps = batch * updates
    return {"training_iteration": i,
            "learners": {"default_policy": {"policy_loss": 1.0 / i},
                         "__all_modules__": {"num_env_steps_trained_lifetime": steps * i}},
            "evaluation": {"env_runners": {"episode_return_mean": 100.0 * i,
                                           "episode_return_min": 90.0 * i,
                                           "episode_return_max": 110.0 * i}}}


@pytest.fixture()
def captured(monkeypatch):
    figures = []

    def keep(plt, fig, path):
        figures.append(fig)
        return path

    monkeypatch.setattr(plotting, "_save_atomic", keep)
    return figures


@pytest.mark.parametrize("x_axis, expected", [("iteration", [1, 2, 3]),
                                              ("updates", [10, 20, 30]),
                                              ("samples", [2560, 5120, 7680])])
def test_x_axis_choices(captured, x_axis, expected):
    history = [result(i) for i in (1, 2, 3)]
    plotting.save_learning_curve(history, "x.png", x_axis=x_axis, updates_per_iteration=10,
                                 target_return=450.0)
    ax_loss, ax_ret = captured[0].axes
    np.testing.assert_array_equal(ax_loss.lines[0].get_xdata(), expected)
    np.testing.assert_array_equal(ax_ret.lines[0].get_xdata(), expected)
    assert ax_loss.get_xlabel() == plotting.X_AXES[x_axis]
    target = [ln for ln in ax_ret.lines if ln.get_linestyle() == "--"]
    assert [ln.get_ydata()[0] for ln in target] == [450.0]


def test_bad_x_axis_and_updates_without_a_count_are_clear_errors(captured):
    with pytest.raises(ValueError, match="x_axis must be one of"):
        plotting.save_learning_curve([result(1)], "x.png", x_axis="epochs")
    with pytest.raises(ValueError, match="updates_per_iteration"):
        plotting.save_learning_curve([result(1)], "x.png", x_axis="updates")


def test_writes_a_png(tmp_path):
    path = plotting.save_learning_curve([result(1), result(2)], str(tmp_path / "c.png"),
                                        x_axis="samples")
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def _visible_tick_labels(fig, ax):
    fig.canvas.draw()
    lo, hi = sorted(ax.get_xlim())
    renderer = fig.canvas.get_renderer()
    return [(t.get_text(), t.get_window_extent(renderer)) for t, x in
            zip(ax.get_xticklabels(), ax.get_xticks(), strict=True)
            if lo <= x <= hi and t.get_text()]


def test_sample_counts_on_the_x_axis_do_not_run_into_each_other(captured):
    # The demo's curve: 8 iterations of 15,000 samples each ("105000120000" ran together).
    history = [result(i, batch=1500) for i in range(1, 9)]
    plotting.save_learning_curve(history, "x.png", x_axis="samples", target_return=450.0)
    fig = captured[0]
    for ax in fig.axes:
        labels = _visible_tick_labels(fig, ax)
        assert len(labels) >= 3, labels
        for (a, box_a), (b, box_b) in zip(labels, labels[1:]):
            assert box_a.x1 + 2 < box_b.x0, f"tick labels {a!r} and {b!r} overlap"


def test_return_histogram_of_equal_returns_has_a_readable_axis(captured):
    plotting.save_return_histogram({"expert data": [500.0] * 50, "BC policy": [500.0] * 20},
                                   "x.png")
    fig = captured[0]
    (ax,) = fig.axes
    fig.canvas.draw()
    assert ax.xaxis.get_offset_text().get_text() == ""  # was "1e-6+5e2"
    lo, hi = ax.get_xlim()
    assert lo < 500.0 < hi and hi - lo >= 1.0
    texts = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert any(t.replace("\u2212", "-") in ("500", "500.0") for t in texts), texts
    heights = [p.get_height() for p in ax.patches]
    assert max(heights) == pytest.approx(1.0)  # every episode in one bar per data set
