import pytest

from hardware_specs import load_hardware
from models import load_model


@pytest.fixture(scope="session")
def h100_cluster():
    return load_hardware("dgx-h100", 64)


@pytest.fixture(scope="session")
def gpt_22b():
    return load_model("gpt-22b")
