"""`python -m resilience`: the command line (see `resilience._cli`)."""

from resilience._cli import main

if __name__ == "__main__":
    main()
