"""Generate an N-model dbt project, the shape of a large real one, for the benchmarks.

A layered DAG: a few seeds, then models that ref() one to three models of earlier
layers (a distinct union, so every test passes and a build succeeds), every tenth
documented in schema.yml with a column and two tests. The layout is seeded, so two
runs with the same N write the same project.

    python bench/gen_project.py DEST [--models N]
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

SEEDS = 5
LAYER = 250  # models per layer; each reads only from earlier layers


def generate(dest: Path, models: int, seed: int = 7) -> Path:
    rng = random.Random(seed)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "dbt_project.yml").write_text(
        "name: bench\nversion: '1.0.0'\nconfig-version: 2\nprofile: bench\n"
        "models:\n  bench:\n    +materialized: view\n"
    )
    seeds = dest / "seeds"
    seeds.mkdir(exist_ok=True)
    for s in range(SEEDS):
        (seeds / f"seed_{s}.csv").write_text("id,value\n1,a\n2,b\n")
    folder = dest / "models"
    folder.mkdir(exist_ok=True)
    docs = ["version: 2", "models:"]
    for i in range(models):
        layer = i // LAYER
        if layer == 0:
            parents = [f"ref('seed_{rng.randrange(SEEDS)}')"]
        else:
            picked = rng.sample(range(layer * LAYER), rng.randint(1, 3))
            parents = [f"ref('m_{p:05d}')" for p in sorted(picked)]
        body = "\nunion\n".join(f"select id, value from {{{{ {p} }}}}" for p in parents)
        (folder / f"m_{i:05d}.sql").write_text(body + "\n")
        if i % 10 == 0:
            docs += [
                f"  - name: m_{i:05d}",
                f"    description: Model {i} of the generated project.",
                "    columns:",
                "      - name: id",
                "        data_tests: [not_null, unique]",
            ]
    (folder / "schema.yml").write_text("\n".join(docs) + "\n")
    return dest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path)
    parser.add_argument("--models", type=int, default=5000)
    args = parser.parse_args()
    generate(args.dest, args.models)
    print(f"wrote a {args.models}-model project to {args.dest}")


if __name__ == "__main__":
    main()
