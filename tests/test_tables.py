"""Command-line tables: aligned columns, and a last column that wraps to the terminal's width; Markdown
tables with right-aligned columns."""

from ironaccel.cts import tables

ROWS = [["target", "runnable", "what to do"],
        ["vulkan/nvidia", "no", "needs an NVIDIA GPU with its driver's Vulkan ICD (nvidia_icd.json) and libvulkan1"],
        ["cuda/fake", "yes", ""]]


def test_columns_align_without_a_width():
    lines = tables.plain(ROWS).splitlines()
    assert lines[1].startswith("-------------  --------  ")
    assert lines[2].startswith("vulkan/nvidia  no        needs")


def test_the_last_column_wraps_under_itself_within_the_width():
    lines = tables.plain(ROWS, width=60).splitlines()
    assert all(len(line) <= 60 for line in lines), lines
    start = lines[0].index("what to do")
    continued = [line for line in lines[3:] if not line.startswith("cuda/fake")]
    assert continued and all(line[:start].strip() == "" for line in continued)
    text = " ".join(line[start:].strip() for line in lines[2:-1])
    assert text == ROWS[1][2]


def test_markdown_right_aligns_the_columns_asked_for():
    lines = tables.markdown(["client", "pass", "share"], [["numba-cuda", "360", "98.1%"]], right={1, 2})
    assert lines == ["| client | pass | share |", "|---|---:|---:|", "| numba-cuda | 360 | 98.1% |"]
    assert tables.markdown(["a", "b"], [])[1] == "|---|---|"
