"""The test shop's one model."""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    """An order; the receipt job sets ``receipt_sent``."""

    receipt_sent = models.BooleanField(default=False)

    class Meta:
        app_label = "shop"
