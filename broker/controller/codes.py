"""The controller's request and response codes: they live beside the broker's remoting codes
(broker.remoting.controller_codes), since a broker in controller mode speaks them too."""
from broker.remoting.controller_codes import *  # noqa: F401,F403
