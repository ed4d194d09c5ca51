"""The Hugging Face Space's entry point: the app itself is `webapp.main` (`rumik app`).

    python app.py --model tiny      # the same as: rumik app --model tiny
"""

from webapp.main import build_demo, launch, main, parse_args  # noqa: F401 (the Space's and the tests' names)

if __name__ == "__main__":
    main()
