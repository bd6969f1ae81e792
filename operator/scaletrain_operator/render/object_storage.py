"""spec.objectStorage as the env of the containers that get the rank env (children.render_env): the AWS SDKs' own
variables (wire.S3_*), which the trainer's s3fs, boto3 in a script of one's own and the AWS CLI all read.

- AWS_ENDPOINT_URL, AWS_REGION: the literal values, when set.
- AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN (with sessionTokenKey): secretKeyRefs to
  credentialsSecret, so the rendered Job holds the Secret's name and keys, never a key itself. Without
  credentialsSecret none is set, and the SDK finds the pod's own identity (IRSA's web identity, the node's role).

Part of the spec, so of the spec hash: a changed endpoint or Secret restarts a running gang, as any spec change."""

from __future__ import annotations

from typing import Any

from scaletrain_trainer.contract import wire

from ..api.spec import CredentialsSecret, ObjectStorage


def object_storage_env(storage: ObjectStorage | None) -> list[dict[str, Any]]:
    """The variables of `storage`, in the order the module's docstring lists them; none when it is unset."""
    if storage is None:
        return []
    values = {wire.S3_ENDPOINT_ENV: storage.endpoint, wire.S3_REGION_ENV: storage.region}
    literal = [{"name": name, "value": value} for name, value in values.items() if value is not None]
    return literal + _credentials_env(storage.credentials_secret)


def _credentials_env(secret: CredentialsSecret | None) -> list[dict[str, Any]]:
    if secret is None:
        return []
    keys = {
        wire.S3_ACCESS_KEY_ENV: secret.access_key_id_key,
        wire.S3_SECRET_KEY_ENV: secret.secret_access_key_key,
        wire.S3_SESSION_TOKEN_ENV: secret.session_token_key,
    }
    return [
        {"name": name, "valueFrom": {"secretKeyRef": {"name": secret.name, "key": key}}}
        for name, key in keys.items()
        if key is not None
    ]
