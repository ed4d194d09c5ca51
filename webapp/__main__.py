"""`python -m webapp`: the app, as `rumik app` (webapp.main)."""

from webapp.main import main

main()
