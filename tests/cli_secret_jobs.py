"""Jobs with secret args for the CLI's redaction tests (``--app tests.cli_secret_jobs``, in a CLI subprocess only:
it declares a schedule, which a worker of the test process would register)."""

from __future__ import annotations

from pgqueue import Job, JobContext

SECRET = "hunter2-very-secret"


class SignIn(Job):
    """A unique job keyed by its secret: the key ``unique_by`` derives quotes the password."""

    name = "cli_secret:sign_in"
    queue = "accounts"
    redact = ("password",)
    unique_by = ("password",)

    user: str
    password: str

    async def handle(self, context: JobContext) -> None:
        raise NotImplementedError


class NightlyLogin(Job):
    """A periodic job whose schedule_args hold a secret (``schedule:list --json`` shows the args)."""

    name = "cli_secret:nightly_login"
    queue = "accounts"
    redact = ("password",)
    schedule = "0 3 * * *"
    schedule_args = {"user": "ops", "password": SECRET}

    user: str
    password: str

    async def handle(self, context: JobContext) -> None:
        return None
