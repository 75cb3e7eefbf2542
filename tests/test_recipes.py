"""The published recipes as files (each body's published/ folder): each builds, as published
and as its replaced-token-detection twin, on the meta device; each names its sources; and
docs/how-to/recipes.md shows every file's numbers as the file holds them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from electra.model.bodies import preset_names, recipe
from electra.model.bodies.spec import published_table
from electra.objectives.pretraining import ElectraPretrainingModel
from electra.run_config import run_preset

PAGE = Path(__file__).parents[1] / "docs/how-to/recipes.md"
PUBLISHED = [n for n in preset_names() if recipe(n).file is not None]


def test_the_published_recipes_are_there_each_with_its_twin():
    assert {"ettin-17m", "ettin-17m-decay", "mmbert-small", "mmbert-small-ext",
            "mmbert-small-decay", "neobert", "bert-base-mask-decay"} <= set(PUBLISHED)
    for name in PUBLISHED:
        if not name.endswith("-rtd"):
            assert f"{name}-rtd" in PUBLISHED, name
    masks = [run_preset(n).objective.mask_prob for n in
             ("mmbert-small", "mmbert-small-ext", "mmbert-small-decay")]
    assert masks == [0.3, 0.15, 0.05]  # mmBERT's 30 -> 15 -> 5


@pytest.mark.parametrize("name", PUBLISHED)
def test_each_recipe_builds_on_the_meta_device(name):
    cfg = run_preset(name)
    r = recipe(name)
    assert r.about["what"] and r.about["sources"], name
    with torch.device("meta"):
        model = ElectraPretrainingModel(cfg.model.replace(vocab_size=50368), cfg.objective)
    assert (model.generator is not None) == name.endswith("-rtd")
    assert cfg.objective.kind == ("electra" if name.endswith("-rtd") else "mlm")
    # every setting the file gives says where it comes from, or what a CPU scaled it down from
    documented = set(r.about.get("from", {})) | set(r.about.get("scaled", {}))
    given = {f"train.{k}" for k in r.train} | {f"objective.{k}" for k in r.objective}
    assert given - documented <= {"objective.kind", "objective.mask_token_prob",
                                  "objective.random_token_prob"} or name.endswith("-rtd")


def test_the_page_shows_every_files_numbers():
    page = PAGE.read_text()
    for name in PUBLISHED:
        if name.endswith("-rtd"):
            continue
        assert f"## `{name}`" in page, name
        assert published_table(recipe(name)) in page, (
            f"docs/how-to/recipes.md's table for {name} differs from its file; "
            f"python tests/test_recipes.py rewrites the tables")


def write_page() -> None:
    """Rewrite each table of docs/how-to/recipes.md from its file (the prose stays):
    ``python tests/test_recipes.py``."""
    page = PAGE.read_text()
    for name in PUBLISHED:
        if name.endswith("-rtd"):
            continue
        start = page.index("| setting | value | from |", page.index(f"## `{name}`"))
        end = page.find("\n## ", start)
        end = len(page) if end < 0 else end + 1
        page = page[:start] + published_table(recipe(name)) + "\n" + page[end:]
    PAGE.write_text(page)


if __name__ == "__main__":
    write_page()
