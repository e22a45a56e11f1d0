"""`grpokit push RUN REPO_ID`: a run's exported folder (weights, tokenizer, model card) uploaded to the Hub.

What can fail in seconds is asked first, before any model loads: is RUN a run folder, can the hub be reached
(`grpokit.models.hub`), is there a token the hub accepts. Then the run is exported (into `RUN/export` unless
told otherwise) when it was not yet, the card is written again with the repo's name in its snippet, and the
folder goes up: `create_repo(exist_ok=True)`, then `upload_folder`.
"""

from __future__ import annotations

import logging
from pathlib import Path

from huggingface_hub import HfApi, get_token

from grpokit.errors import HubAuthError, HubUnreachable
from grpokit.models import export, hub
from grpokit.models.card import write_card

log = logging.getLogger(__name__)

LOGIN = "set HF_TOKEN to a token with write access, or run `hf auth login` (`huggingface-cli login` before it)"


def is_export(folder: Path) -> bool:
    """Whether `folder` holds a finished `grpokit export` (its provenance file and weights)."""
    return (folder / "grpokit_export.json").is_file() and any(folder.glob("*.safetensors"))


def check_hub() -> HfApi:
    """An HfApi whose token the hub accepts; raises at once, naming the fix, when the hub cannot be reached or
    there is no token or the hub refuses it."""
    reason = hub.unreachable_reason()
    if reason is not None:
        raise HubUnreachable(
            f"cannot push: the Hugging Face Hub cannot be reached ({reason}); connect to the network "
            "(and unset HF_HUB_OFFLINE), then push again. Nothing was exported or uploaded."
        )
    if get_token() is None:
        raise HubAuthError(f"cannot push: no Hugging Face token; {LOGIN}. Nothing was exported or uploaded.")
    api = HfApi()
    try:
        api.whoami()
    except Exception as err:  # the hub's refusal (an HTTP error) and a dropped connection alike: one plain line
        raise HubAuthError(
            f"cannot push: the hub refused the token ({err}); {LOGIN}. Nothing was exported or uploaded."
        ) from None
    return api


def main(run_dir: str | Path, repo_id: str, private: bool = False, export_dir: str | Path | None = None) -> str:
    """Push run `run_dir` to the model repo `repo_id`; return the repo's URL."""
    run_dir = Path(run_dir)
    if not (run_dir / "recipe.yaml").is_file():
        raise FileNotFoundError(f"{run_dir} has no recipe.yaml: push takes a grpokit run directory")
    if "/" not in repo_id:
        raise ValueError(f"repo id {repo_id!r}: use owner/name, e.g. your-name/{run_dir.parent.name}-grpo")
    folder = Path(export_dir) if export_dir else export.default_export_dir(run_dir)
    exported = folder.is_dir() and is_export(folder)
    if not exported and folder.exists() and any(folder.iterdir()):
        raise FileExistsError(
            f"{folder} is not empty and holds no grpokit export; pass --export-dir with a new folder or an export"
        )
    api = check_hub()
    if exported:
        log.info("pushing the export already in %s", folder)
    else:
        export.main(run_dir, folder)
    write_card(run_dir, folder, repo_id)  # the snippet names the repo
    try:
        url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        api.upload_folder(
            repo_id=repo_id,
            folder_path=str(folder),
            repo_type="model",
            commit_message=f"grpokit push of run {run_dir.name}",
        )
    except Exception as err:  # as above: the message, not a traceback
        raise OSError(
            f"the upload to {repo_id} failed ({type(err).__name__}: {err}); the export stays in {folder}: "
            f"push again with --export-dir {folder}"
        ) from None
    log.info("pushed %s to %s", folder, url)
    return str(url)
