SCALE = 3.0


def double(x):
    return x * 2
