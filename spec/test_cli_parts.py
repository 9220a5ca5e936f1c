"""`torchlet parts vNN`: a version's recipe, read from its PARTS.

What it introduces: one line per part in assembly order (PART_NAMES): its name, what it is
(Recipe.table()'s label), the version that wrote it (Version.writer) and the file it lives in,
relative to the tree; a `*` marks each part the version swaps itself. `--impl-root=DIR` reads
another tree, as the other commands do.
Why: the package docstrings were hand-kept maps of which version's file holds which piece; the
recipe is data, so the command prints it and cannot drift from what build assembles.
Core principle: the lines are the recipe's own rows, nothing inferred: the writer is the version
whose `replace` (or `first`) put the part there, the file is where the part's class or function
is defined. A user's mistake (an unknown version, a version without PARTS, a missing tree) is one
line on stderr and a non-zero exit, never a traceback.
Files: torchlet/parts.py (recipe_rows, format_rows, the command), torchlet/cli.py (PLUGINS);
spec/support/inputs/recipe_tree.py (the tree of versions these specs read).
Tradeoff left visible: reading a recipe imports the version's package (a Triton version imports
Triton), since PARTS is built by running its module.
"""
from __future__ import annotations

import pytest

import implementations
from spec.support.inputs.recipe_tree import ROWS, write_recipe_tree
from torchlet import cli
from torchlet.parts import recipe_rows


def run(capsys, *argv):
    capsys.readouterr()  # the test's own set-up (a model directory written first) is not the CLI's
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def tree(tmp_path):
    return write_recipe_tree(tmp_path / "tree")


def cells(out: str) -> list[tuple]:
    """(part, label, writer, file, marked) of each part line of the command's output."""
    found = []
    for line in out.splitlines()[2:]:
        part, label, writer, file = line[2:].split()
        found.append((part, label, writer, file, line.startswith("* ")))
    return found


@pytest.mark.parametrize("version", ["v00_first", "v01_second"])
def test_each_part_is_one_line_with_its_label_writer_and_file_in_assembly_order(capsys, tree,
                                                                                version):
    code, out, err = run(capsys, "parts", version.split("_")[0], f"--impl-root={tree}")
    assert code == 0, err
    assert out.splitlines()[0].startswith(f"{version}'s recipe")
    assert out.splitlines()[1].split() == ["part", "what", "it", "is", "written", "by", "file"]
    assert cells(out) == ROWS[version]


def test_the_parts_a_version_swaps_are_marked_and_those_it_takes_over_are_not(capsys, tree):
    code, out, _ = run(capsys, "parts", "v01_second", "--impl-root", str(tree))
    assert code == 0
    marked = {part for part, *_, mine in cells(out) if mine}
    assert marked == {"kv", "loop"}


@pytest.mark.parametrize("argv, code, message", [
    (["v07"], 2, "unknown version 'v07'; known versions: v00_first, v01_second, v02_bare"),
    (["v02"], 1, "v02_bare declares no recipe (PARTS)"),
    ([""], 2, "the version name is empty"),
])
def test_a_version_without_a_recipe_or_unknown_is_one_line(capsys, tree, argv, code, message):
    got, out, err = run(capsys, "parts", *argv, f"--impl-root={tree}")
    assert (got, out) == (code, "")
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_a_missing_impl_root_is_one_line(capsys, tmp_path):
    code, out, err = run(capsys, "parts", "v00", f"--impl-root={tmp_path / 'nope'}")
    assert code == 1 and err.count("\n") == 1 and "does not exist" in err


def test_the_reference_v14_lists_every_part_of_its_recipe_with_the_version_that_wrote_it(capsys):
    version = implementations.load("v14")
    if version.recipe is None:
        pytest.skip("v14 declares no PARTS yet")
    assert_lists_its_recipe(capsys, version)


def assert_lists_its_recipe(capsys, version):
    root = version.package.__file__.rsplit("/", 2)[0]
    code, out, err = run(capsys, "parts", version.name, f"--impl-root={root}")
    assert code == 0, err
    names = implementations.version_names(root)
    table = version.recipe.table()
    rows = recipe_rows(version)
    assert [(r.name, r.label) for r in rows] == [(name, label) for name, label, _ in table]
    assert all(r.writer in names and r.writer == version.writer(r.name) for r in rows)
    assert {r.name for r in rows if r.swapped} == set(version.recipe.swapped())
    lines = out.splitlines()[2:]
    assert len(lines) == len(table)
    for line, row in zip(lines, rows):
        assert line.startswith("* " if row.swapped else "  ")
        assert line[2:].split()[0] == row.name
        assert f"  {row.writer}  " in line and line.endswith(row.file)


def test_every_part_is_filed_under_the_version_that_wrote_it():
    """"written by" and "file" agree for every part of every version: v13's model, v08's
    PagedDecoder class composed with v13's ops and memory, is filed where v13 makes it
    (v13_fused/model.py), not in the file of its class."""
    wrong = [(version.name, r.name, r.writer, r.file) for version in implementations.discover()
             for r in recipe_rows(version) or () if r.file.split("/")[0] != r.writer]
    assert not wrong, f"(version, part, written by, file): {wrong}"
