"""The fixture's root package: the trainer's entry point would live here."""


def backend() -> str:
    return "teamrl"
