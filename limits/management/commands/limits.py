from __future__ import annotations

import argparse
import sys

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from limits import cli, services
from limits.config import ConfigError, load_workspace
from limits.management.commands.limits_sweep import summary as sweep_summary
from limits.printable import printable
from limits.runs import bounds as run_bounds
from limits.tokens import TokenError, issue_token


class Command(BaseCommand):
    help = (
        "Operate concurrency limits: list, show, slots, keys, release, capacity, max-hold, per-key, pause, resume, "
        "share, on-full, max-waiting, weight, min, box, verify, forget, sync, sweep, token."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        verbs = cli.add_verbs(parser)
        verbs.add_parser("sync", help="Bring declared limits from the workspace config to the database.")
        verbs.add_parser("sweep", help="Run one pass of the sweep (beat runs it every 15 seconds).")
        token = verbs.add_parser("token", help="Issue a bearer token for the JSON API (stackbone limits --agent).")
        token_verbs = token.add_subparsers(dest="token_verb", required=True)
        create = token_verbs.add_parser("create", help="Issue a token for a user; it is shown once.")
        create.add_argument("username")
        create.add_argument("--name", default="", help="what the token is for (at most 100 characters)")

    def handle(self, *args: object, **options: object) -> None:
        verb = options["verb"]
        if verb == "sync":
            try:
                report = services.sync_workspace(load_workspace())
                bounds = run_bounds.sync()
            except (ConfigError, services.LimitsError) as error:
                raise CommandError(str(error)) from None
            self.stdout.write(
                f"synced: {len(report.created)} created, {len(report.updated)} updated, "
                f"{len(report.undeclared)} undeclared; workflow bounds: {len(bounds.created)} created, "
                f"{len(bounds.updated)} updated, {len(bounds.undeclared)} undeclared"
            )
        elif verb == "sweep":
            self.stdout.write(sweep_summary(services.sweep()))
        elif verb == "token":
            self._create_token(str(options["username"]), str(options["name"]))
        else:
            streams = cli.Streams(stdin=sys.stdin, stdout=self.stdout, stderr=self.stderr)
            namespace = argparse.Namespace(**options)
            try:
                cli.execute(namespace, io=streams)
            except cli.CliError as error:
                raise CommandError(printable(error.message), returncode=error.code) from None

    def _create_token(self, username: str, name: str) -> None:
        user = get_user_model().objects.filter(**{get_user_model().USERNAME_FIELD: username}).first()
        if user is None:
            raise CommandError(f"unknown user {username!r}", returncode=cli.EXIT_NOT_FOUND)
        try:
            token, raw = issue_token(user, name=name)
        except TokenError as error:
            raise CommandError(error.message, returncode=cli.EXIT_USAGE) from None
        if not user.has_perm("limits.operate_limit"):
            self.stderr.write(
                f"note: {printable(username)} may read but not change limits (no limits.operate_limit permission)"
            )
        self.stdout.write(raw)
