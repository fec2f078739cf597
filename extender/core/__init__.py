"""The pure, synchronous core: model, quantities, CEL, allocator, scoring. No I/O, no asyncio."""
