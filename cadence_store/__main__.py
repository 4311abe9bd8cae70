"""`python -m cadence_store`: the `cadence-store` command line."""

from .cli import main

if __name__ == "__main__":
    main(prog_name="cadence-store")
