from __future__ import annotations

import taskdecomp


def test_all_is_sorted_and_complete() -> None:
    assert taskdecomp.__all__ == sorted(taskdecomp.__all__)
    public = {name for name in dir(taskdecomp) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(taskdecomp, name)).__name__ == "module"}
    assert public - modules - {"annotations"} == set(taskdecomp.__all__)
    for name in taskdecomp.__all__:
        assert hasattr(taskdecomp, name), name
