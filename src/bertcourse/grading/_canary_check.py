"""The canary: a check that must fail in every judge session, with the engine's nonce as its message.

If the engine does not see it failed with that nonce, assertions were not live (python -O, a plugin
that swallows failures, a session that never ran) and the grade is void.
"""


def check_bertcourse_canary(bertcourse_canary_nonce):
    assert bertcourse_canary_nonce == "", bertcourse_canary_nonce
