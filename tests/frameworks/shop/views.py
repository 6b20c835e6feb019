"""The shop's views: an order and its receipt job, committed together (sync and async)."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.db import transaction
from django.http import HttpRequest, JsonResponse

from pgqueue.contrib.django import adispatch, dispatch
from tests.frameworks.shop.jobs import SendReceipt
from tests.frameworks.shop.models import Order


def place_order(request: HttpRequest) -> JsonResponse:
    with transaction.atomic():
        order = Order.objects.create()
        job_id = dispatch(SendReceipt(order_id=order.id))
    return JsonResponse({"order": order.id, "job": str(job_id)})


async def place_order_async(request: HttpRequest) -> JsonResponse:
    order = await sync_to_async(Order.objects.create)()
    job_id = await adispatch(SendReceipt(order_id=order.id))
    return JsonResponse({"order": order.id, "job": str(job_id)})
