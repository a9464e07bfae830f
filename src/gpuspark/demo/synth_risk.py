"""A synthetic credit-risk table (``synth_risk``), generated and written as Parquet by Spark.

Every value is a Spark column expression over ``spark.range(rows)``: uniforms come from
``xxhash64(seed, stream, key)``, so the table depends on the seed only (not on the number of
partitions or the cluster), and customer attributes (age, region, education...) stay the same
across a customer's monthly snapshots because their key is the customer, not the row.

The label ``default`` is drawn from a logistic model with fixed coefficients on observed
columns plus a hidden per-customer risk factor (which also shifts several observed columns, as
a bank's own risk grade would): about 3% positives, a held-out ROC AUC near 0.9 for a good
model and above 0.85 for logistic regression on the columns (log of the heavy-tailed ones).
"""

from __future__ import annotations

import math
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuspark import storage
from gpuspark.cluster.submit import prepare_job
from gpuspark.demo.staging import commit_dir, staging_dir
from gpuspark.errors import GpusparkError

__all__ = ["RISK_CATEGORIES", "SynthRiskResult", "synth_risk"]


@dataclass(frozen=True)
class SynthRiskResult:
    """What ``synth_risk`` wrote: ``files`` Parquet part files, ``bytes`` in all;
    ``customers`` generated (a bad row's null id still counts its customer)."""

    path: str
    rows: int
    customers: int
    positives: int
    positive_rate: float
    files: int
    bytes: int
    seconds: float


RISK_CATEGORIES: dict[str, tuple[str, ...]] = {
    "region": tuple(f"region_{i:02d}" for i in range(1, 21)),
    "employment_type": (
        "employed",
        "self_employed",
        "retired",
        "part_time",
        "student",
        "unemployed",
    ),
    "product": ("credit_card", "personal_loan", "auto_loan", "mortgage", "overdraft"),
    "housing": ("rent", "mortgage", "own", "family"),
    "channel": ("online", "branch", "mobile", "broker", "partner", "phone", "mail", "referral"),
    "education": ("secondary", "bachelor", "vocational", "master", "doctorate"),
}
"""The categorical columns and their values, most frequent first (Zipf-like shares)."""

# Snapshots per customer: rows come in groups of 21 = 1+2+...+6, so that customers have 1 to
# 6 monthly rows (mean 3.5) and every count is equally common among customers.
_SNAPSHOTS = (1, 2, 3, 4, 5, 6)
_GROUP = sum(_SNAPSHOTS)
_U_BITS = 1 << 52
_INTERCEPT = -7.3
"""Sets the positive rate (about 3%): calibrated once on 200k rows with _NOISE."""
_NOISE = 2.2
"""Scale of the unobserved per-row part of the logit: keeps the best AUC near 0.9."""
_ROWS_PER_PARTITION = 250_000


def synth_risk(
    dst: str | os.PathLike[str],
    rows: int,
    seed: int = 0,
    *,
    partitions: int | None = None,
    overwrite: bool = False,
    bad_rows: float = 0.0,
    spark: Any = None,
    master: str | None = None,
    spec: Any = None,
) -> SynthRiskResult:
    """Write a synthetic credit-risk table of ``rows`` monthly snapshots as Parquet at ``dst``.

    Columns: ``customer_id`` (1-6 rows each), ``month``, ``default`` (0/1, about 3% ones),
    numeric features (income with 4% nulls, age, debt_to_income, credit_utilization, ...),
    Zipf-skewed categoricals (:data:`RISK_CATEGORIES`) and two pure-noise columns.
    ``bad_rows``: that fraction of rows get a value a prep job must quarantine (a null
    ``default``, an infinite ``income`` or a null ``customer_id``). Spark writes into a
    temporary folder beside ``dst``, renamed into place when complete; a non-empty ``dst`` is
    refused unless ``overwrite``. Same seed, same rows.
    """
    t0 = time.monotonic()
    root = _check_args(dst, rows, partitions, bad_rows)
    from gpuspark.cluster.session import job_session

    job = prepare_job(spec=spec, master=master, app_name="gpuspark-synth-risk")
    tmp = staging_dir(root, overwrite)
    try:
        with job_session(spark=spark, **job.session_args()) as sp:
            n_parts = partitions or max(1, -(-rows // _ROWS_PER_PARTITION))
            df = risk_frame(sp, rows, seed, n_parts, bad_rows)
            df.write.mode("overwrite").parquet(str(tmp))
            positives = _positives(sp, str(tmp))
        files = sorted(tmp.glob("*.parquet"))
        commit_dir(tmp, root, "datasets synth-risk")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return SynthRiskResult(
        path=str(root),
        rows=rows,
        customers=_customers(rows),
        positives=positives,
        positive_rate=round(positives / rows, 6),
        files=len(files),
        bytes=sum(f.stat().st_size for f in (root / f.name for f in files)),
        seconds=round(time.monotonic() - t0, 3),
    )


def _check_args(
    dst: str | os.PathLike[str], rows: int, partitions: int | None, bad_rows: float
) -> Path:
    text = os.fspath(dst)
    if storage.is_url(text):
        raise GpusparkError(
            f"destination {text} is a remote URL",
            remedy="write to a local or shared path (the folder is renamed into place)",
        )
    if rows < 1:
        raise GpusparkError(f"rows must be at least 1, got {rows}")
    if partitions is not None and partitions < 1:
        raise GpusparkError(f"partitions must be at least 1, got {partitions}")
    if not 0.0 <= bad_rows < 1.0:
        raise GpusparkError(f"bad_rows must be a fraction in [0, 1), got {bad_rows}")
    return Path(storage.local_path(text)).expanduser().absolute()


def _customers(rows: int) -> int:
    """Customers among the first ``rows`` rows (each group of rows holds one customer per
    snapshot count; the last group may stop part-way)."""
    full, rest = divmod(rows, _GROUP)
    starts = [sum(_SNAPSHOTS[:i]) for i in range(len(_SNAPSHOTS))]
    return full * len(_SNAPSHOTS) + sum(1 for s in starts if s < rest)


def _positives(spark: Any, path: str) -> int:
    """Positive labels of the written table (one Spark job over one column)."""
    from pyspark.sql import functions as F

    row = spark.read.parquet(path).agg(F.sum("default").alias("positives")).first()
    return int(row["positives"] or 0)


# --------------------------------------------------------------------------- expressions


def _uniform(seed: int, stream: int, key: Any) -> Any:
    """A uniform in (0, 1) from a hash of (seed, stream, key): independent per stream."""
    from pyspark.sql import functions as F

    h = F.xxhash64(F.lit(seed), F.lit(stream), key)
    return (F.pmod(h, F.lit(_U_BITS)).cast("double") + 0.5) / float(_U_BITS)


def _normal(seed: int, stream: int, key: Any) -> Any:
    """A standard normal (Box-Muller on two uniforms of the stream)."""
    from pyspark.sql import functions as F

    u1, u2 = _uniform(seed, stream, key), _uniform(seed, stream + 1000, key)
    return F.sqrt(-2.0 * F.log(u1)) * F.cos(2.0 * math.pi * u2)


def _zipf_pick(u: Any, values: Sequence[Any], s: float = 1.1) -> Any:
    """``values[i]`` with probability proportional to ``1 / (i + 1) ** s``."""
    from pyspark.sql import functions as F

    weights = [1.0 / (i + 1) ** s for i in range(len(values))]
    total, acc = sum(weights), 0.0
    expr = None
    for value, w in zip(values[:-1], weights[:-1], strict=True):
        acc += w / total
        expr = F.when(u < acc, F.lit(value)) if expr is None else expr.when(u < acc, value)
    return F.lit(values[-1]) if expr is None else expr.otherwise(F.lit(values[-1]))


def _clip(col: Any, lo: float, hi: float) -> Any:
    from pyspark.sql import functions as F

    return F.least(F.greatest(col, F.lit(lo)), F.lit(hi))


def _sigmoid(col: Any) -> Any:
    from pyspark.sql import functions as F

    return 1.0 / (1.0 + F.exp(-col))


def _customer_keys(df: Any) -> Any:
    """``cust`` (customer number) and ``month`` (1..snapshots) from the row number ``id``."""
    from pyspark.sql import functions as F

    group, offset = F.floor(F.col("id") / _GROUP), F.col("id") % _GROUP
    slot, start = F.lit(0), F.lit(0)
    bound = 0
    for i, n in enumerate(_SNAPSHOTS[:-1]):
        bound += n
        slot = F.when(offset >= bound, F.lit(i + 1)).otherwise(slot)
        start = F.when(offset >= bound, F.lit(bound)).otherwise(start)
    return df.withColumn("cust", group * len(_SNAPSHOTS) + slot).withColumn(
        "month", (offset - start + 1).cast("int")
    )


def risk_frame(spark: Any, rows: int, seed: int, partitions: int, bad_rows: float = 0.0) -> Any:
    """The synthetic risk table as a lazy DataFrame (see :func:`synth_risk`)."""
    df = _customer_keys(spark.range(0, rows, 1, partitions))
    df = _customer_columns(df, seed)
    df = _monthly_columns(df, seed)
    df = _label(df, seed)
    return _finish(df, seed, bad_rows)


def _customer_columns(df: Any, seed: int) -> Any:
    """Attributes fixed per customer, and the hidden risk factor ``_risk``."""
    from pyspark.sql import functions as F

    c = F.col("cust")
    # each uniform is a column of its own, so that the picks' WHEN branches share one hash
    # (Spark does not collapse a projection that would repeat an expensive expression)
    names = list(RISK_CATEGORIES)
    df = df.withColumns({f"_u_{n}": _uniform(seed, 10 + i, c) for i, n in enumerate(names)})
    cats = {n: _zipf_pick(F.col(f"_u_{n}"), RISK_CATEGORIES[n]) for n in names}
    kuma = F.pow(1.0 - F.pow(1.0 - _uniform(seed, 20, c), 1.0 / 2.2), 1.0 / 1.3)
    return df.withColumns(
        {
            "_risk": _normal(seed, 1, c),
            "customer_id": F.lower(F.hex(F.xxhash64(F.lit(seed), F.lit("customer"), c))),
            "age": _clip(F.round(44.0 + 15.0 * _normal(seed, 2, c)), 18, 90).cast("int"),
            **cats,
            "_kuma": kuma,
            "_inc": 10.7 + 0.5 * _normal(seed, 3, c),
            "_tenure": F.floor(_uniform(seed, 21, c) * 240.0).cast("int"),
            "_delinq_u": _uniform(seed, 22, c),
            "_msd": F.floor(-F.log(_uniform(seed, 23, c)) * 18.0),
            "noise_2": F.round(_uniform(seed, 24, c), 6),
        }
    ).withColumn(
        "_edu",
        F.when(F.col("education").isin("master", "doctorate"), 0.25)
        .when(F.col("education") == "secondary", -0.15)
        .otherwise(0.05),
    )


def _monthly_columns(df: Any, seed: int) -> Any:
    """Values that change from one snapshot to the next."""
    from pyspark.sql import functions as F

    r, k = F.col("_risk"), F.col("id")
    emp = F.col("employment_type")
    income = F.exp(F.col("_inc") + F.col("_edu") - 0.12 * r + 0.05 * _normal(seed, 30, k))
    income = F.when(emp.isin("unemployed", "student"), income * 0.35).otherwise(income)
    df = df.withColumns(
        {
            "_util": _clip(F.col("_kuma") + 0.08 * r + 0.06 * _normal(seed, 31, k), 0.0, 1.0),
            "_u_term": _uniform(seed, 33, k),
        }
    )
    util = F.col("_util")
    mortgage = F.col("product") == "mortgage"
    loan = F.exp(9.2 + 0.6 * _normal(seed, 32, k)) * F.when(mortgage, 9.0).otherwise(1.0)
    term = F.when(mortgage, _zipf_pick(F.col("_u_term"), (300, 240, 360), 0.5)).otherwise(
        _zipf_pick(F.col("_u_term"), (36, 60, 24, 48, 12), 0.6)
    )
    late_p = _sigmoid(-2.4 + 0.9 * r + 2.0 * (util - 0.35))
    late = F.when(
        _uniform(seed, 34, k) < late_p, 1 + F.floor(-F.log(_uniform(seed, 35, k)) * 1.5)
    ).otherwise(0)
    delinquent = F.col("_delinq_u") < _sigmoid(-1.2 + 0.9 * r)
    savings = F.when(_uniform(seed, 36, k) < 0.15, 0.0).otherwise(
        F.exp(7.6 - 0.3 * r + 1.6 * _normal(seed, 37, k))
    )
    return df.withColumns(
        {
            "_income": income,
            "credit_utilization": F.round(util, 4),
            "debt_to_income": F.round(
                _clip(F.exp(-1.3 + 0.45 * _normal(seed, 38, k) + 0.12 * r), 0.0, 3.0), 4
            ),
            "n_credit_lines": F.greatest(
                F.round(3.5 + 1.8 * _normal(seed, 39, k) + 0.4 * r), F.lit(0.0)
            ).cast("int"),
            "months_since_delinquency": F.when(
                delinquent, F.least(F.col("_msd") + F.col("month"), F.lit(120.0))
            ).cast("int"),
            "n_late_payments_12m": F.least(late, F.lit(12)).cast("int"),
            "loan_amount": F.round(loan, 2),
            "loan_term_months": term.cast("int"),
            "interest_rate": F.round(
                _clip(
                    6.5
                    + 1.8 * r
                    + 1.2 * _normal(seed, 40, k)
                    - F.when(mortgage, 2.5).otherwise(0.0),
                    1.5,
                    29.9,
                ),
                2,
            ),
            "savings_balance": F.round(savings, 2),
            "tenure_months": F.col("_tenure") + F.col("month"),
            "noise_1": F.round(_normal(seed, 41, k), 6),
        }
    )


def _label(df: Any, seed: int) -> Any:
    """``default`` ~ Bernoulli(sigmoid(logit)), the logit linear in observed columns (plus
    the hidden risk factor and a utilisation threshold that a linear model misses)."""
    from pyspark.sql import functions as F

    def col(name: str) -> Any:
        return F.col(name)

    msd = col("months_since_delinquency")
    logit = (
        F.lit(_INTERCEPT)
        + 0.7 * col("_risk")
        + _NOISE * _normal(seed, 51, col("id"))
        + 1.1 * (col("credit_utilization") - 0.35) / 0.22
        + 0.5 * (F.log(col("debt_to_income") + 0.01) + 1.3) / 0.45
        - 0.45 * (F.log(col("_income")) - 10.7) / 0.5
        + 0.45 * F.least(col("n_late_payments_12m"), F.lit(5))
        + F.when(msd.isNull(), 0.0).when(msd < 12, 0.9).otherwise(0.4)
        - 0.2 * (col("age") - 44) / 15.0
        + 0.35 * (col("interest_rate") - 6.5) / 2.0
        - 0.12 * F.log1p(col("savings_balance"))
        + F.when(col("credit_utilization") > 0.9, 0.8).otherwise(0.0)
        + F.when(col("employment_type") == "unemployed", 0.9)
        .when(col("employment_type") == "student", 0.4)
        .when(col("employment_type") == "self_employed", 0.25)
        .otherwise(0.0)
        + F.when(col("housing") == "rent", 0.25).when(col("housing") == "own", -0.3).otherwise(0.0)
        + F.when(col("product") == "mortgage", -0.5)
        .when(col("product") == "overdraft", 0.3)
        .otherwise(0.0)
    )
    y = (_uniform(seed, 50, col("id")) < _sigmoid(logit)).cast("int")
    return df.withColumn("default", y)


def _finish(df: Any, seed: int, bad_rows: float) -> Any:
    """Public columns in order; the bad rows get their one bad value."""
    from pyspark.sql import functions as F

    k = F.col("id")
    income = F.when(_uniform(seed, 60, k) < 0.04, F.lit(None)).otherwise(
        F.round(F.col("_income"), 2)
    )
    bad = _uniform(seed, 61, k) < bad_rows
    kind = F.floor(_uniform(seed, 62, k) * 3.0)
    if bad_rows > 0:
        df = df.withColumns(
            {
                "default": F.when(bad & (kind == 0), F.lit(None)).otherwise(F.col("default")),
                "customer_id": F.when(bad & (kind == 2), F.lit(None)).otherwise(
                    F.col("customer_id")
                ),
            }
        )
        income = F.when(bad & (kind == 1), F.lit(float("inf"))).otherwise(income)
    df = df.withColumn("income", income.cast("double"))
    return df.select(
        "customer_id",
        "month",
        "default",
        "age",
        "income",
        "employment_type",
        "education",
        "housing",
        "region",
        "channel",
        "product",
        "loan_amount",
        "loan_term_months",
        "interest_rate",
        "debt_to_income",
        "credit_utilization",
        "n_credit_lines",
        "n_late_payments_12m",
        "months_since_delinquency",
        "savings_balance",
        "tenure_months",
        "noise_1",
        "noise_2",
    )
