"""Writing a candidate calibration profile (validation/candidates/*.yaml): the part every fit script shares."""
from __future__ import annotations

import datetime
from pathlib import Path


def write_candidate_profile(data: dict, files: list[str], fit_key: str, fit_entry: dict, candidate: str,
                            out: Path) -> None:
    """Add ``files`` to the profile ``data``'s ``fitted_on`` (once each, in order), record ``fit_entry`` under
    ``fits[fit_key]``, set its ``candidate`` line to ``candidate`` with today's date after the first ``{date}``
    placeholder, and write it as YAML to ``out``."""
    import yaml
    data["fitted_on"] = list(dict.fromkeys(list(data.get("fitted_on") or []) + files))
    data.setdefault("fits", {})[fit_key] = fit_entry
    data["candidate"] = candidate.format(date=datetime.date.today().isoformat())
    out.write_text(yaml.safe_dump(data, sort_keys=False, width=110))


def registered_line(tag: str, session: int, profile: str, draw: str = "attention fresh draw") -> str:
    """The ``candidate`` line of a candidate registered beside ``profile`` for the next ``draw`` (a ``{date}``
    placeholder left for :func:`write_candidate_profile`)."""
    return (f"{tag} (issue #12 session {session}, {{date}}): registered beside {profile} for the next {draw}; "
            "not adopted unless it wins there")


def attention_fresh_paths(gpu: str, before: int | None = None) -> list[Path]:
    """The committed attention fresh-draw files of ``gpu`` (``h200``/``h100``; validation/measurements and its
    repeat/ folder, ``<gpu>_attention_fresh<seed>.json``), those of seed below ``before`` only when given."""
    import re
    meas = Path(__file__).resolve().parent / "measurements"
    paths = sorted(meas.glob(f"{gpu}_attention_fresh*.json")) + sorted(meas.glob(f"repeat/{gpu}_attention_fresh*.json"))
    return [p for p in paths if before is None or int(re.search(r"fresh(\d+)", p.name).group(1)) < before]
