"""Measuring decode speed and what each way of speeding it up costs."""
