# shellcheck shell=bash
WHEEL_ARGS=()
