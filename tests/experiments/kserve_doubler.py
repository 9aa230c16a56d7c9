"""A minimal foreign KServe v2 server, the kserve package's own ModelServer (not hetserve's
code): model ``doubler`` doubles its FP32 input ``x`` of shape [-1, 4]. It has no Triton
configuration extension, so a client must give its SLO. Run: ``python kserve_doubler.py
PORT``."""

import sys

import numpy as np
from kserve import InferRequest, Model, ModelServer
from kserve.utils.utils import get_predict_response


class Doubler(Model):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.ready = True

    def get_input_types(self):
        return [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]

    def get_output_types(self):
        return [{"name": "y", "datatype": "FP32", "shape": [-1, 4]}]

    async def predict(self, payload: InferRequest, headers=None, response_headers=None):
        x = payload.inputs[0].as_numpy()
        return get_predict_response(payload, np.asarray(x) * 2, self.name)


if __name__ == "__main__":
    port = int(sys.argv[1])
    server = ModelServer(http_port=port, grpc_port=port + 1, enable_grpc=False, workers=1)
    server.start([Doubler("doubler")])
