"""Family ``json-csv``: read a JSON field, extract or sum a CSV column, write a JSON object.

Unseen templates: ``json-write``, ``csv-row-count``, ``json-keys`` and ``csv-filter-guided`` (test); ``csv-max``
and ``json-count-guided`` (val).
"""

from __future__ import annotations

import json
import random

from forge_cli.envs.builtin import checks
from forge_cli.envs.builtin.template import CITIES, NAMES, WORDS, Instance, guided, sh, template, text, words

FAMILY = "json-csv"
CONFIGS = ("config.json", "settings.json", "app.json", "meta.json")
PEOPLE = ("people.csv", "staff.csv", "members.csv", "users.csv")
SALES = ("sales.csv", "orders.csv", "stock.csv", "invoices.csv")


def _people(rng: random.Random) -> list[tuple[str, str, str]]:
    """5-8 rows (name, age, city) with distinct names."""
    return [(name, str(rng.randint(18, 80)), rng.choice(CITIES)) for name in rng.sample(NAMES, rng.randint(5, 8))]


@template(FAMILY, "easy", guided=True)
def json_field(rng: random.Random) -> Instance:
    """One command, shown in the instruction (a python3 one-liner; the image has no jq)."""
    config = {"name": rng.choice(WORDS), "port": rng.randint(1024, 9999),
              "version": f"{rng.randint(1, 4)}.{rng.randint(0, 9)}.{rng.randint(0, 9)}", "owner": rng.choice(NAMES)}
    key, name = rng.choice(sorted(config)), rng.choice(CONFIGS)
    command = f"python3 -c \"import json; print(json.load(open('{name}'))['{key}'])\" > value.txt"
    return Instance(
        instruction=f"{name} holds a JSON object. Write the value of its `{key}` field into value.txt (only "
                    f"the value, without quotes), for example with: {command}",
        files={name: json.dumps(config, indent=2) + "\n"},
        check=checks.answer, args={"path": "value.txt", "expected": [str(config[key])]},
        solution=command)


@template(FAMILY, "medium")
def csv_column(rng: random.Random) -> Instance:
    """``cut`` a column without its header; partial credit by the F1 of the lines written."""
    rows, name = _people(rng), rng.choice(PEOPLE)
    columns = ["name", "age", "city"]
    index = rng.randrange(3)
    column = columns[index]
    return Instance(
        instruction=f"{name} has the columns name,age,city and a header line. Write the values of its "
                    f"`{column}` column (without the header), one per line in the file's order, into {column}.txt.",
        files={name: text([",".join(columns), *(",".join(row) for row in rows)])},
        check=checks.lines, args={"path": f"{column}.txt", "expected": [row[index] for row in rows]},
        solution=f"cut -d, -f{index + 1} {name} | tail -n +2 > {column}.txt")


@template(FAMILY, "medium")
def csv_sum(rng: random.Random) -> Instance:
    """Sum a column (``awk``) and write the number."""
    rows = [(item, rng.randint(1, 40), rng.randint(1, 99)) for item in words(rng, rng.randint(4, 7))]
    name, column = rng.choice(SALES), rng.choice(["qty", "price"])
    index = 1 if column == "qty" else 2
    total, out = str(sum(int(row[index]) for row in rows)), rng.choice(["total.txt", "sum.txt"])
    return Instance(
        instruction=f"{name} has the columns item,qty,price and a header line. Write the sum of its `{column}` "
                    f"column (one number) into {out}.",
        files={name: text(["item,qty,price", *(f"{item},{qty},{price}" for item, qty, price in rows)])},
        check=checks.answer, args={"path": out, "expected": [total], "numeric": True},
        solution=f"awk -F, 'NR > 1 {{s += ${index + 1}}} END {{print s}}' {name} > {out}", secrets=(total,))


@template(FAMILY, "medium", held_out="test")
def json_write(rng: random.Random) -> Instance:
    """Write a small JSON object; partial credit per key with the right value."""
    stem = rng.choice(["user", "person", "member", "profile"])
    value = {"name": rng.choice(NAMES), "age": rng.randint(18, 90)}
    return Instance(
        instruction=f"Create a file named {stem}.json holding a JSON object with exactly two keys: `name`, the "
                    f"string `{value['name']}`, and `age`, the number {value['age']}.",
        check=checks.json_object, args={"path": f"{stem}.json", "expected": value},
        solution=f"echo {sh(json.dumps(value))} > {stem}.json")


@template(FAMILY, "easy", guided=True)
def csv_to_text_guided(rng: random.Random) -> Instance:
    """Guided: a CSV file turned into space-separated text with the shown ``tr``."""
    columns = rng.sample(["id", "name", "city", "age", "price", "qty", "team"], rng.randint(2, 4))
    stem = rng.choice(["data", "people", "orders", "stock", "items", "scores", "teams", "visits"])
    rows = [",".join(columns), *(",".join(str(rng.randint(1, 99)) for _ in columns) for _ in range(rng.randint(2, 5)))]
    out = f"{stem}.{rng.choice(['txt', 'out'])}"
    command = f"tr ',' ' ' < {stem}.csv > {out}"
    return Instance(instruction=guided(f"Convert {stem}.csv to {out} (spaces instead of commas).", command),
                    files={f"{stem}.csv": text(rows)}, check=checks.lines,
                    args={"path": out, "expected": [row.replace(",", " ") for row in rows]},
                    solution=command)


@template(FAMILY, "easy", held_out="test")
def csv_row_count(rng: random.Random) -> Instance:
    """The number of data rows of a CSV file: its lines minus the header."""
    rows, name, out = _people(rng), rng.choice(PEOPLE), rng.choice(["rows.txt", "people.txt", "size.txt"])
    count = str(len(rows))
    return Instance(
        instruction=f"{name} has a header line followed by one line per person. How many people does it list? "
                    f"Write only the number into {out}.",
        files={name: text(["name,age,city", *(",".join(row) for row in rows)])},
        check=checks.answer, args={"path": out, "expected": [count], "numeric": True},
        solution=f"tail -n +2 {name} | wc -l > {out}", secrets=(count,))


@template(FAMILY, "medium", held_out="test")
def json_keys(rng: random.Random) -> Instance:
    """The keys of a JSON object, one per line in the file's order."""
    name, out = rng.choice(CONFIGS), rng.choice(["keys.txt", "fields.txt", "names.txt"])
    keys = rng.sample(["name", "port", "host", "debug", "owner", "region", "timeout", "retries"], rng.randint(3, 5))
    config = {key: rng.randint(1, 99) for key in keys}
    return Instance(
        instruction=f"{name} holds a JSON object. Write the names of its keys into {out}, one per line, in the "
                    "order the file lists them.",
        files={name: json.dumps(config, indent=2) + "\n"},
        check=checks.lines, args={"path": out, "expected": keys},
        solution=f"python3 -c \"import json; print('\\n'.join(json.load(open('{name}'))))\" > {out}")


@template(FAMILY, "easy", guided=True, held_out="test")
def csv_filter_guided(rng: random.Random) -> Instance:
    """Guided: the rows of one city, with the shown ``grep``."""
    rows, name = _people(rng), rng.choice(PEOPLE)
    city = rng.choice([row[2] for row in rows])
    out = f"{city.lower()}.csv"
    command = f"grep ',{city}$' {name} > {out}"
    return Instance(instruction=guided(f"Write the rows of {name} whose city is {city} into {out}.", command),
                    files={name: text(["name,age,city", *(",".join(row) for row in rows)])}, check=checks.lines,
                    args={"path": out, "expected": [",".join(row) for row in rows if row[2] == city]},
                    solution=command)


@template(FAMILY, "medium", held_out="val")
def csv_max(rng: random.Random) -> Instance:
    """The largest value of a numeric column (``sort -n | tail``), header excluded."""
    rows = [(item, rng.randint(1, 40), rng.randint(100, 999)) for item in words(rng, rng.randint(4, 7))]
    name = rng.choice(SALES)
    column = rng.choice(["qty", "price"])
    index = 1 if column == "qty" else 2
    top, out = str(max(int(row[index]) for row in rows)), rng.choice(["max.txt", "top.txt"])
    return Instance(
        instruction=f"{name} has the columns item,qty,price and a header line. What is the largest value in its "
                    f"`{column}` column? Write only that number into {out}.",
        files={name: text(["item,qty,price", *(f"{item},{qty},{price}" for item, qty, price in rows)])},
        check=checks.answer, args={"path": out, "expected": [top], "numeric": True},
        solution=f"tail -n +2 {name} | cut -d, -f{index + 1} | sort -n | tail -n 1 > {out}", secrets=(top,))


@template(FAMILY, "easy", guided=True, held_out="val")
def json_count_guided(rng: random.Random) -> Instance:
    """Guided: the length of a JSON list, with the shown python3 one-liner."""
    name = rng.choice(["items.json", "tasks.json", "users.json", "events.json"])
    out, values = rng.choice(["count.txt", "length.txt", "entries.txt"]), words(rng, rng.randint(3, 9))
    command = f"python3 -c \"import json; print(len(json.load(open('{name}'))))\" > {out}"
    return Instance(instruction=guided(f"Write the number of entries of the JSON list in {name} into {out}.",
                                       command),
                    files={name: json.dumps(values) + "\n"}, check=checks.answer,
                    args={"path": out, "expected": [str(len(values))], "numeric": True}, solution=command)
