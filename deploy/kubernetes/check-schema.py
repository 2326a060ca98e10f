#!/usr/bin/env python3
"""Validates Kubernetes manifests offline against the vendored JSON schemas in schema/.

usage: check-schema.py MANIFEST.yaml...

Strict: the schemas forbid fields they do not define (a misspelled field is an error), and a
key given twice in one mapping is an error too (YAML would keep the last silently). Prints one
line per problem and exits 1 if there is any.
"""
import json
import pathlib
import sys

import jsonschema
import yaml

SCHEMA_DIR = pathlib.Path(__file__).resolve().parent / "schema"
# (apiVersion, kind) -> the schema file (yannh/kubernetes-json-schema's naming).
SCHEMAS = {("apps/v1", "DaemonSet"): "daemonset-apps-v1.json"}


class StrictLoader(yaml.SafeLoader):
    """A SafeLoader that refuses duplicate keys."""


def _mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def check(path):
    problems = []
    try:
        docs = list(yaml.load_all(pathlib.Path(path).read_text(), Loader=StrictLoader))
    except (OSError, yaml.YAMLError) as e:
        return [f"{path}: {' '.join(str(e).split())}"]
    for i, doc in enumerate(docs):
        if doc is None:
            continue
        where = f"{path}: document {i + 1}"
        if not isinstance(doc, dict):
            problems.append(f"{where}: not a mapping")
            continue
        key = (doc.get("apiVersion"), doc.get("kind"))
        name = SCHEMAS.get(key)
        if name is None:
            problems.append(f"{where}: no vendored schema for {key[0]} {key[1]}")
            continue
        where += f" ({key[1]} {doc.get('metadata', {}).get('name', '?')})"
        schema = json.loads((SCHEMA_DIR / name).read_text())
        validator = jsonschema.Draft7Validator(schema)
        for err in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
            at = ".".join(str(p) for p in err.absolute_path) or "(top)"
            problems.append(f"{where}: at {at}: {err.message}")
    return problems


def main(argv):
    if len(argv) < 2:
        print("usage: check-schema.py MANIFEST.yaml...", file=sys.stderr)
        return 2
    problems = [p for path in argv[1:] for p in check(path)]
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
