"""Family ``json-csv``: read a JSON field, extract or sum a CSV column, write a JSON object."""

from __future__ import annotations

import json
import random

from forge_cli.envs.builtin import checks
from forge_cli.envs.builtin.template import CITIES, NAMES, WORDS, Instance, guided, sh, template, text, words

FAMILY = "json-csv"


@template(FAMILY, "easy")
def json_field(rng: random.Random) -> Instance:
    """One command, shown in the instruction (a python3 one-liner; the image has no jq)."""
    config = {"name": rng.choice(WORDS), "port": rng.randint(1024, 9999),
              "version": f"{rng.randint(1, 4)}.{rng.randint(0, 9)}.{rng.randint(0, 9)}", "owner": rng.choice(NAMES)}
    key = rng.choice(sorted(config))
    command = f"python3 -c \"import json; print(json.load(open('config.json'))['{key}'])\" > value.txt"
    return Instance(
        instruction=f"config.json holds a JSON object. Write the value of its `{key}` field into value.txt (only "
                    f"the value, without quotes), for example with: {command}",
        files={"config.json": json.dumps(config, indent=2) + "\n"},
        check=checks.answer, args={"path": "value.txt", "expected": [str(config[key])]},
        solution=command)


@template(FAMILY, "medium")
def csv_column(rng: random.Random) -> Instance:
    """``cut`` a column without its header; partial credit by the F1 of the lines written."""
    rows = [(name, str(rng.randint(18, 80)), rng.choice(CITIES)) for name in rng.sample(NAMES, rng.randint(5, 8))]
    columns = ["name", "age", "city"]
    index = rng.randrange(3)
    column = columns[index]
    return Instance(
        instruction=f"people.csv has the columns name,age,city and a header line. Write the values of its "
                    f"`{column}` column (without the header), one per line in the file's order, into {column}.txt.",
        files={"people.csv": text([",".join(columns), *(",".join(row) for row in rows)])},
        check=checks.lines, args={"path": f"{column}.txt", "expected": [row[index] for row in rows]},
        solution=f"cut -d, -f{index + 1} people.csv | tail -n +2 > {column}.txt")


@template(FAMILY, "medium")
def csv_sum(rng: random.Random) -> Instance:
    """Sum a column (``awk``) and write the number."""
    rows = [(item, rng.randint(1, 40), rng.randint(1, 99)) for item in words(rng, rng.randint(4, 7))]
    total = str(sum(qty for _, qty, _ in rows))
    return Instance(
        instruction="sales.csv has the columns item,qty,price and a header line. Write the sum of its `qty` "
                    "column (one number) into total.txt.",
        files={"sales.csv": text(["item,qty,price", *(f"{item},{qty},{price}" for item, qty, price in rows)])},
        check=checks.answer, args={"path": "total.txt", "expected": [total], "numeric": True},
        solution="awk -F, 'NR > 1 {s += $2} END {print s}' sales.csv > total.txt", secrets=(total,))


@template(FAMILY, "medium", held_out=True)
def json_write(rng: random.Random) -> Instance:
    """Write a small JSON object; partial credit per key with the right value."""
    stem = rng.choice(["user", "person", "member", "profile"])
    value = {"name": rng.choice(NAMES), "age": rng.randint(18, 90)}
    return Instance(
        instruction=f"Create a file named {stem}.json holding a JSON object with exactly two keys: `name`, the "
                    f"string `{value['name']}`, and `age`, the number {value['age']}.",
        check=checks.json_object, args={"path": f"{stem}.json", "expected": value},
        solution=f"echo {sh(json.dumps(value))} > {stem}.json")


@template(FAMILY, "easy")
def csv_to_text_guided(rng: random.Random) -> Instance:
    """Guided: a CSV file turned into space-separated text with the shown ``tr``."""
    columns = rng.sample(["id", "name", "city", "age", "price", "qty", "team"], rng.randint(2, 4))
    stem = rng.choice(["data", "people", "orders", "stock"])
    rows = [",".join(columns), *(",".join(str(rng.randint(1, 99)) for _ in columns) for _ in range(rng.randint(2, 5)))]
    command = f"tr ',' ' ' < {stem}.csv > {stem}.txt"
    return Instance(instruction=guided(f"Convert {stem}.csv to {stem}.txt (spaces instead of commas).", command),
                    files={f"{stem}.csv": text(rows)}, check=checks.lines,
                    args={"path": f"{stem}.txt", "expected": [row.replace(",", " ") for row in rows]},
                    solution=command)
