"""The driver's log4j2 routing: a file per process, errors only on the console (no Spark)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuspark.cluster import driver_log
from gpuspark.cluster.session import session_plan


def test_plan_points_the_driver_at_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("GPUSPARK_LOG_DIR", str(tmp_path))
    monkeypatch.setattr(driver_log, "_FILE", None)
    options = session_plan("local[2]").conf["spark.driver.extraJavaOptions"]
    first = options.split(" ")[0]  # then the JVM start-up options (gpuspark.cluster.jvm)
    assert first == f"-Dlog4j2.configurationFile=file:{tmp_path}/" + (
        driver_log.driver_log_file().name.replace(".log", ".log4j2.properties")
    )


def test_user_log4j_choice_is_kept() -> None:
    mine = "-Dlog4j2.configurationFile=file:/etc/mine.properties"
    assert driver_log.driver_java_options(mine) is None
    assert driver_log.driver_java_options("-Xss4m").startswith("-Xss4m -Dlog4j2")


def test_config_sends_everything_to_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("GPUSPARK_LOG_DIR", str(tmp_path))
    monkeypatch.setattr(driver_log, "_FILE", None)
    monkeypatch.setenv(driver_log.CONSOLE_LEVEL_ENV, "warn")
    target = driver_log.write_log_config()
    text = target.with_suffix(".log4j2.properties").read_text()
    assert f"appender.file.fileName = {target}" in text
    assert "appender.console.filter.threshold.level = warn" in text
    assert "rootLogger.level = info" in text
    monkeypatch.setenv(driver_log.CONSOLE_LEVEL_ENV, "nonsense")
    driver_log.write_log_config()
    assert "threshold.level = error" in target.with_suffix(".log4j2.properties").read_text()


def test_the_starvation_warning_reaches_the_console_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUSPARK_LOG_DIR", str(tmp_path))
    monkeypatch.setattr(driver_log, "_FILE", None)
    monkeypatch.delenv(driver_log.CONSOLE_LEVEL_ENV, raising=False)
    config = driver_log.write_log_config().with_suffix(".log4j2.properties")
    text = config.read_text()
    assert f"regex = .*{driver_log.STARVING}.*" in text
    assert "logger.waiting.name = org.apache.spark.scheduler.TaskSchedulerImpl" in text
    assert "%d{yy/MM/dd HH:mm:ss}" in text and "{{" not in text
    monkeypatch.setenv(driver_log.CONSOLE_LEVEL_ENV, "warn")  # the console shows it already
    driver_log.write_log_config()
    assert "appender.waiting" not in config.read_text()
