"""What the SDK scripts of tests/sdk print: one JSON object per line, read by tests/tests/e2e/sdk.rs."""

import json


def emit(obj):
    print(json.dumps(obj), flush=True)


def raised(id_, fn):
    """Calls `fn`, which must raise: prints the exception's class and HTTP status under `id_`."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the class is what is checked
        status = getattr(e, "status_code", None) or getattr(e, "code", None)
        emit({"id": id_, "check": "raised", "class": type(e).__name__, "status": status})
        return
    emit({"id": id_, "check": "raised", "class": None})
