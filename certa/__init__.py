"""certa: declare LLM reasoning programs, run them with certaindex early exit."""
from certa.runtime import *  # noqa: F401,F403
