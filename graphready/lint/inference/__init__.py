"""What an expression holds (device tensor, host data, scalar): the inference the rules rely on."""
