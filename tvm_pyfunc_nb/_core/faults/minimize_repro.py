def repro_of(judge, result):
    return None
