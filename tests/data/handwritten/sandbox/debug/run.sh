echo debug
