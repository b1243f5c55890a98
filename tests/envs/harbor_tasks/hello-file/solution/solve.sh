#!/bin/bash
echo 'Hello, Harbor!' > /app/hello.txt
