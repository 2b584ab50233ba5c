"""User-facing errors: one line naming the problem and the fix, exit code 2, no traceback."""


class UserError(Exception):
    exit_code = 2
