"""URLs of the test shop: the admin and the order views."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

from tests.frameworks.shop import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("orders/", views.place_order),
    path("orders/async/", views.place_order_async),
]
