/** Entry point of the engine role (`node dist/engine/main.js` in the container image). */
import './server.js';
