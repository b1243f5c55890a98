"""A stand-in for EasyOCR in forge's OSWorld environment ($FORGE_HOME/envs/osworld, scripts/setup.sh osworld).

desktop_env's evaluators import easyocr at import time (metrics/docs.py) but only one metric uses it
(compare_image_text, which reads text in an image). The real package pulls torch and model downloads, so forge
installs this stub instead: importing works, and using it raises an error naming the OCR metric's need.
"""

__version__ = "0.0.0+forge.stub"

MESSAGE = ("easyocr is a stub in forge's OSWorld environment: OSWorld's OCR metric (compare_image_text) needs the "
           "real package (pip install easyocr into $FORGE_HOME/envs/osworld; it pulls torch)")


class Reader:
    def __init__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError(MESSAGE)


def __getattr__(name: str) -> object:
    if name.startswith("__"):
        raise AttributeError(name)
    raise RuntimeError(f"{MESSAGE} (easyocr.{name})")
