#!/bin/sh
echo tools
