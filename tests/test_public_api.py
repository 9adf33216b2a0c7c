import streams


def test_all_is_sorted_and_complete() -> None:
    assert streams.__all__ == sorted(streams.__all__)
    for name in streams.__all__:
        assert getattr(streams, name) is not None


def test_domain_modules_import_neither_kafka_nor_faust() -> None:
    import ast
    from pathlib import Path

    root = Path(streams.__file__).parent
    domain = ["actors", "targets", "feedback", "events", "scores", "typeinfo", "view",
              "tenancy", "errors", "rules", "runs", "evaluators", "evaluation", "judges"]
    for name in domain:
        tree = ast.parse((root / f"{name}.py").read_text())
        imported = {
            alias.name.split(".")[0] for node in ast.walk(tree)
            if isinstance(node, ast.Import) for alias in node.names
        } | {
            (node.module or "").split(".")[0] for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
        }
        bad = imported & {"faust", "confluent_kafka", "aiokafka", "mode"}
        assert not bad, f"streams.{name} imports {bad}"
        inner = {
            node.module for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
            and node.module.startswith(("streams.kafka", "streams.worker", "streams.avro"))
        }
        assert not inner, f"streams.{name} imports adapters {inner}"
