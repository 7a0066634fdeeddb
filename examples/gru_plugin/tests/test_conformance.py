"""The plugin's models keep recurbench's contracts: one call of the kit per kind."""

from recurbench_gru import GRUCore, GRUForecaster, GRURecognizer

from recurbench.testing import check_core, check_forecaster, check_language_model, check_plugin


def test_the_core_keeps_the_contract():
    check_core(GRUCore)


def test_the_forecaster_keeps_the_contract():
    check_forecaster(GRUForecaster)


def test_the_language_model_keeps_the_contract():
    check_language_model(GRURecognizer)


def test_installed_it_is_found_under_its_entry_point_names():
    assert set(check_plugin("gru")) == {"memory core", "forecaster", "language model"}
