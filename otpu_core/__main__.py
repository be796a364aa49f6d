"""`python -m otpu_core` is `otpu`."""
from .cli import main

main()
