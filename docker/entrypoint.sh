#!/bin/sh
# Entrypoint of the accel-gateway image.
#
#   (no arguments), -OPTION ...   accel-gateway serve --host 0.0.0.0
#                                   --model-repository "${MODEL_REPOSITORY:-/models}" -OPTION ...
#   serve                         SageMaker, which runs the image as `docker run IMAGE serve`:
#                                 accel-gateway serve --sagemaker
#                                   --model-repository "${MODEL_REPOSITORY:-/opt/ml/model}"
#   serve -OPTION ...             as -OPTION ... alone
#   anything else                 run as a command: docker run IMAGE accel-gateway compile ...
#
# ACCEL_GATEWAY names the accel-gateway executable (default: accel-gateway on PATH). Every
# branch ends in exec, so the server is PID 1 and receives docker stop's SIGTERM.
set -eu

gateway=${ACCEL_GATEWAY:-accel-gateway}

if [ "$#" -eq 1 ] && [ "$1" = serve ]; then
    exec "$gateway" serve --sagemaker --sagemaker-port "${SAGEMAKER_BIND_TO_PORT:-8080}" \
        --host 0.0.0.0 --model-repository "${MODEL_REPOSITORY:-/opt/ml/model}"
fi
if [ "$#" -gt 1 ] && [ "$1" = serve ]; then
    shift
fi
case "${1:--}" in
    -*)
        exec "$gateway" serve --host 0.0.0.0 --model-repository "${MODEL_REPOSITORY:-/models}" "$@"
        ;;
    *) exec "$@" ;;
esac
