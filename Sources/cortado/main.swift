print("cortado")
