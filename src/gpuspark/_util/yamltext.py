"""YAML text for the rendered Prometheus and Alertmanager files: keys in the order given,
multi-line strings (PromQL) as literal blocks, so the files read like hand-written ones."""

from __future__ import annotations

from typing import Any

__all__ = ["dump_yaml"]


def dump_yaml(data: Any) -> str:
    """``data`` as block-style YAML; strings with newlines become ``|`` literal blocks."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:  # no &id001 anchors: plain copies
            return True

    def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    _Dumper.add_representer(str, _str)
    return yaml.dump(
        data,
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=4096,
    )
