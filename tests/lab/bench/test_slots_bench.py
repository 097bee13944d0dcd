"""``bench slots`` (issue 53): every system plays a page stream, seeded; the margins' verdicts; the
``--quick`` run's report resumes from its store."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.bench import benches, slots
from lab.sim.pages import Pages

SMALL = Pages("small", True, 9, 200, n_users=30, n_items=40)


def test_every_system_plays_a_page_stream_and_the_seed_decides_it() -> None:
    stream = SMALL.stream(0)
    runs = {
        "ours": slots.run_ours(stream, 0),
        "independent": slots.run_independent(stream, 0),
        "vw": slots.run_vw(f"--squarecb {slots.VW_Q}", stream, 0),
    }
    for got in runs.values():
        assert len(got["slots"]) == 3 and all(0.0 < r < 1.0 for r in got["slots"])
        assert got["page"] == pytest.approx(sum(got["slots"]))
    assert runs["ours"]["repeats"] == 0 == runs["vw"]["repeats"]  # no item fills two slots
    assert runs["independent"]["repeats"] > 0  # deciding slots alone shows items twice
    again = slots.run_ours(stream, 0)
    assert again["slots"] == runs["ours"]["slots"]


def test_margins_are_paired_by_seed_and_say_who_is_ahead() -> None:
    def run(*rewards: float) -> dict:
        return {"slots": list(rewards), "page": sum(rewards), "repeats": 0.0, "seconds": 1.0}

    runs = {
        "ours": [run(0.5, 0.4, 0.3), run(0.6, 0.4, 0.3)],
        "independent": [run(0.5, 0.5, 0.1), run(0.6, 0.5, 0.1)],
        "vw squarecb": [run(0.4, 0.3, 0.2), run(0.5, 0.3, 0.2)],
        "vw epsilon": [run(0.4, 0.5, 0.2), run(0.5, 0.5, 0.2)],
    }
    rows, vw_ahead, page_ahead = slots.margins(runs, 3)
    assert [r[0].startswith("minus") for r in rows] == [True] * 3
    assert rows[0][2] == "-10.00 ± 0.00" and rows[0][4] == "+0.1000 ± 0.0000"
    assert (
        page_ahead and not vw_ahead
    )  # epsilon's middle slot: 0.45 - 0.4 on the first seed, level on the other
    runs["vw epsilon"][0] = run(0.4, 0.3, 0.2)
    assert slots.margins(runs, 3)[1]


def test_the_quick_report_has_the_must_show_lines_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BENCH_DIR", str(tmp_path))
    small = tuple((Pages(t.name, True, t.seed0, 150, n_users=20, n_items=30),
                   Pages(e.name, False, e.seed0, 150, n_users=20, n_items=30, graded=e.graded))
                  for t, e in slots.STREAMS)  # fmt: skip
    monkeypatch.setattr(slots, "STREAMS", small)
    markdown = benches.get("slots")(True)
    assert "### Must show" in markdown and markdown.count("ahead of the independent slots on the page") == 2
    assert "vw --ccb_explore_adf --squarecb -q ua -q sa" in markdown and "| 300 (default) |" in markdown
    store = tmp_path / "bench" / "slots-runs.jsonl"
    stored = store.read_text().count("\n")
    # two kinds of stream: four systems on two seeds and one tuning seed, and three more gamma_scale
    assert stored == 2 * (4 * (2 + 1) + 3)
    monkeypatch.setattr(slots, "run_vw", None)  # every run is stored: nothing runs again
    assert (
        benches.get("slots")(True).split("Machine:")[1].split("\n", 1)[1]
        == markdown.split("Machine:")[1].split("\n", 1)[1]
    )
